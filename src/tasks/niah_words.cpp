// Word lists for NIAH `adjective-noun` keys and word values (RULER draws them from the wonderwords
// package's lists; these are our own: common, unambiguous English words, lowercase ASCII, each list free
// of duplicates and the two lists disjoint). 465 × 384 = 178560 distinct keys.
#include "drope/tasks/niah.h"

namespace drope::tasks {

const std::vector<std::string>& niah_adjectives() {
  // clang-format off: a word list reads best filled line by line
  static const std::vector<std::string> words = {
    "able", "absent", "abundant", "acidic", "active", "actual", "adorable", "adventurous", "afraid", "agile",
    "agreeable", "alert", "alive", "amber", "ambitious", "ample", "ancient", "angry", "annual", "anxious",
    "apparent", "aquatic", "arctic", "arid", "aromatic", "artistic", "ashamed", "astute", "atomic",
    "attractive", "autumn", "average", "awake", "aware", "awful", "awkward", "bad", "bald", "basic",
    "beautiful", "benign", "bitter", "bizarre", "black", "bland", "blank", "blind", "blissful", "blue",
    "blunt", "bold", "boring", "bouncy", "brave", "breezy", "brief", "bright", "brilliant", "brisk", "broad",
    "broken", "bronze", "brown", "bubbly", "bumpy", "burly", "busy", "calm", "capable", "careful", "careless",
    "casual", "cautious", "celestial", "central", "certain", "charming", "cheap", "cheerful", "chilly",
    "chubby", "civic", "classic", "clean", "clear", "clever", "cloudy", "clumsy", "coastal", "cold",
    "colossal", "colorful", "common", "complex", "confident", "cosmic", "costly", "cozy", "crafty", "crazy",
    "creamy", "creative", "crimson", "crisp", "crooked", "crowded", "cruel", "crystal", "cuddly", "curious",
    "curly", "curved", "cute", "daily", "damp", "dapper", "daring", "dark", "dazzling", "dear", "decent",
    "deep", "defiant", "delicate", "delightful", "dense", "desert", "devoted", "digital", "diligent",
    "direct", "distant", "dizzy", "doubtful", "dramatic", "dreamy", "dry", "dull", "dusty", "dynamic",
    "eager", "early", "earnest", "easy", "eastern", "edible", "elastic", "electric", "elegant", "elite",
    "eloquent", "emerald", "empty", "endless", "energetic", "enormous", "entire", "equal", "essential",
    "eternal", "even", "exact", "excited", "exotic", "expert", "faded", "faint", "fair", "faithful", "famous",
    "fancy", "fast", "fearless", "feisty", "fertile", "festive", "fierce", "fine", "firm", "fiscal", "flat",
    "flawless", "fluffy", "fluid", "foggy", "fond", "formal", "fragile", "frank", "free", "frequent", "fresh",
    "friendly", "frosty", "frozen", "fruitful", "funny", "fuzzy", "gentle", "genuine", "giant", "gifted",
    "gigantic", "glad", "gleaming", "glossy", "golden", "good", "graceful", "grand", "grateful", "gray",
    "great", "green", "grim", "grumpy", "handsome", "happy", "hardy", "harsh", "hasty", "healthy", "heavy",
    "helpful", "hidden", "hollow", "honest", "hopeful", "horizontal", "hot", "huge", "humble", "hungry",
    "icy", "ideal", "idle", "immense", "important", "infinite", "inner", "innocent", "intense", "invisible",
    "ivory", "jagged", "jolly", "jovial", "joyful", "juicy", "jumbo", "keen", "kind", "known", "large",
    "late", "lavish", "lazy", "leafy", "lean", "legal", "light", "likely", "little", "lively", "lofty",
    "lonely", "long", "loud", "lovely", "loyal", "lucky", "lucid", "lunar", "lush", "magenta", "majestic",
    "mature", "meek", "mellow", "merry", "messy", "mighty", "mild", "minor", "misty", "modern", "modest",
    "moist", "molten", "murky", "mute", "mutual", "mysterious", "narrow", "nasty", "native", "natural",
    "neat", "nervous", "new", "nice", "nimble", "noble", "noisy", "normal", "northern", "novel", "obedient",
    "oblong", "obvious", "odd", "open", "optimal", "ordinary", "organic", "oval", "pale", "parallel",
    "patient", "peaceful", "perfect", "petite", "plain", "playful", "pleasant", "plump", "polite", "polished",
    "poor", "popular", "precious", "pretty", "prickly", "primary", "private", "proud", "prudent", "public",
    "puny", "purple", "quaint", "quick", "quiet", "quirky", "radiant", "rapid", "rare", "raw", "ready",
    "real", "rebel", "regal", "remote", "rich", "rigid", "ripe", "rocky", "rosy", "rough", "round", "royal",
    "rugged", "rural", "rustic", "sacred", "salty", "sandy", "scarlet", "secret", "serene", "sharp", "shiny",
    "short", "shy", "silent", "silky", "silver", "simple", "sincere", "sleepy", "slim", "slow", "small",
    "smart", "smooth", "snowy", "soft", "solar", "solid", "sour", "southern", "sparkling", "speedy", "spicy",
    "splendid", "steady", "steep", "sticky", "stormy", "stout", "strange", "strong", "sturdy", "subtle",
    "sudden", "sunny", "super", "swift", "tall", "tame", "tangy", "tender", "tense", "thick", "thin",
    "thirsty", "tidy", "tiny", "tired", "total", "tough", "tranquil", "tropical", "true", "ugly", "ultimate",
    "unique", "upbeat", "upper", "urban", "useful", "vacant", "vague", "valid", "vast", "velvet", "verbal",
    "vibrant", "vital", "vivid", "vocal", "warm", "wary", "weak", "wealthy", "weary", "western", "wet",
    "whimsical", "white", "whole", "wicked", "wide", "wild", "windy", "wise", "witty", "wooden", "worried",
    "yellow", "young", "youthful", "zany", "zealous", "zesty",
  };
  // clang-format on
  return words;
}

const std::vector<std::string>& niah_nouns() {
  // clang-format off: a word list reads best filled line by line
  static const std::vector<std::string> words = {
    "acorn", "actor", "airport", "album", "anchor", "angle", "ankle", "answer", "apple", "apron", "arch",
    "arm", "army", "arrow", "artist", "atlas", "attic", "aunt", "avenue", "badge", "bakery", "balloon",
    "banana", "band", "bank", "barn", "basket", "battery", "beach", "beacon", "beard", "bed", "bee", "bell",
    "belt", "bench", "berry", "bicycle", "bird", "blanket", "blossom", "boat", "bone", "book", "boot",
    "bottle", "boulder", "bowl", "box", "branch", "bread", "breeze", "brick", "bridge", "brook", "broom",
    "brother", "bucket", "budget", "bus", "butter", "button", "cabin", "cable", "cactus", "cake", "camel",
    "camera", "camp", "canal", "candle", "canoe", "canyon", "captain", "car", "carpet", "carrot", "castle",
    "cat", "cave", "cellar", "chair", "chalk", "channel", "cheese", "cherry", "chest", "chicken", "chimney",
    "church", "circle", "city", "clock", "cloud", "coat", "coin", "comet", "compass", "cookie", "copper",
    "corner", "cottage", "cotton", "country", "crayon", "creek", "cricket", "crown", "cup", "curtain",
    "cushion", "daisy", "dancer", "desk", "diamond", "dinner", "doctor", "dog", "dolphin", "door", "dragon",
    "drawer", "dream", "drum", "duck", "eagle", "earth", "echo", "elbow", "elephant", "engine", "envelope",
    "eraser", "fabric", "face", "falcon", "farm", "feather", "fence", "ferry", "field", "finger", "fire",
    "fish", "flag", "flame", "flower", "flute", "forest", "fork", "fountain", "fox", "frog", "fruit",
    "galaxy", "garage", "garden", "gate", "ghost", "giraffe", "glacier", "glass", "glove", "goat", "gold",
    "guitar", "hammer", "harbor", "harp", "hat", "hawk", "heart", "helmet", "hill", "hive", "honey",
    "horizon", "horse", "hotel", "house", "island", "ivy", "jacket", "jar", "jelly", "jewel", "journey",
    "judge", "jungle", "kettle", "key", "kingdom", "kitchen", "kite", "kitten", "knee", "knife", "ladder",
    "lake", "lamp", "lantern", "lawn", "leaf", "lemon", "letter", "library", "lighthouse", "lily", "lion",
    "lizard", "lobster", "locket", "machine", "magnet", "mango", "map", "marble", "market", "meadow",
    "melody", "mirror", "monkey", "moon", "mountain", "mouse", "muffin", "museum", "needle", "nest", "net",
    "notebook", "oak", "ocean", "office", "olive", "onion", "orange", "orchard", "otter", "owl", "paddle",
    "palace", "panda", "paper", "parrot", "path", "peach", "peanut", "pearl", "pebble", "pencil", "penguin",
    "pepper", "piano", "pickle", "picture", "pillow", "pilot", "pine", "planet", "plate", "pocket", "pond",
    "pony", "potato", "puppet", "puzzle", "pyramid", "quarry", "queen", "quilt", "rabbit", "radio", "raft",
    "rain", "rainbow", "raven", "record", "ribbon", "river", "road", "robin", "robot", "rocket", "roof",
    "rose", "ruby", "saddle", "sail", "salmon", "sandwich", "saucer", "school", "scissors", "sea", "seed",
    "shadow", "shark", "shelf", "shell", "ship", "shoe", "shovel", "singer", "sister", "skate", "sky", "sled",
    "snail", "snake", "sock", "sofa", "soldier", "song", "spider", "spoon", "squirrel", "stable", "star",
    "statue", "station", "stone", "storm", "stove", "stream", "street", "sugar", "suitcase", "summit", "sun",
    "swan", "sweater", "table", "tail", "teacher", "teapot", "telescope", "temple", "tent", "thunder",
    "ticket", "tiger", "timber", "toast", "tomato", "tower", "town", "tractor", "train", "treasure", "tree",
    "truck", "trumpet", "tulip", "tunnel", "turtle", "umbrella", "uncle", "universe", "valley", "vase",
    "village", "violin", "volcano", "wagon", "wall", "walnut", "wand", "watch", "waterfall", "wave", "whale",
    "wheel", "whistle", "willow", "window", "wing", "winter", "wizard", "wolf", "workshop", "yacht", "yard",
    "zebra",
  };
  // clang-format on
  return words;
}

}  // namespace drope::tasks
