// A method applied to a trained model without retraining (or before recalibrating it): eval-time RoPE
// scaling, an attention temperature, DroPE. One parser and one set of bounds for drope-eval, drope-analyze
// and drope-train. Written as text:
//   none                      the model as it is
//   pi:S ntk:S dynamic-ntk:S yarn:S dynamic-yarn:S llama3:S   RoPE scaling by S >= 1 (scaling_factor_range)
//   temperature:C             attention temperature β = 1 + C·ln(L/C_train), C >= 0
//   temperature:auto          the fitted C in <model>/temperature.json (drope-eval fit-temperature)
//   drope  drope+qk  drope+q  drope+k   drop every positional embedding, optionally adding QK-norm
// and comma-separated combinations of one of each (yarn:2,temperature:0.1).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "drope/config/model_config.h"
#include "drope/model/drope.h"
#include "drope/model/transformer.h"

namespace drope {

struct Variant {
  RopeScalingType scaling = RopeScalingType::kNone;
  double factor = 0.0;             // S for scaling != none
  bool set_temperature = false;    // temperature:C or temperature:auto
  bool temperature_auto = false;   // read C from <model>/temperature.json
  double temperature = 0.0;        // C when set and not auto
  bool drop = false;               // DroPE
  DropOptions drop_options;        // QK-norm added by DroPE
  int64_t train_length = 0;        // C_train override (the model's max_position when 0)

  bool is_identity() const {
    return scaling == RopeScalingType::kNone && !set_temperature && !drop && train_length == 0;
  }
  // The text form parse_variant reads back ("yarn:2", "temperature:auto", "drope+qk"; "none").
  std::string str() const;
};

// Parses the text form above; `where` (a flag or key) prefixes every error.
Variant parse_variant(std::string_view text, std::string_view where);

// Checks the bounds of a variant built field by field (the same bounds parse_variant applies).
void validate_variant(const Variant& v, std::string_view where);

// The fitted temperature file beside a model directory: <model>/temperature.json.
std::string temperature_file(const std::string& model_dir);
// Reads C from it (written by drope-eval fit-temperature); a missing or malformed file fails clearly, and so does a
// fit made for another model than `applied` (the config it will scale): another training length (β's C), RoPE
// scaling, factor or positional encoding, as far as the file records them.
double read_fitted_temperature(const std::string& model_dir, const ModelConfig& applied);

// The config with the variant applied. model_dir resolves temperature:auto. A RoPE scaling variant on a model
// without RoPE layers is an error.
ModelConfig apply_variant(const ModelConfig& cfg, const Variant& v, const std::string& model_dir);
// The model with the variant applied: the same weights (new QK-norm weights start at 1), on the same device
// and dtype; `model` itself when the variant is the identity.
DecoderLM apply_variant(DecoderLM& model, const Variant& v, const std::string& model_dir);

}  // namespace drope
