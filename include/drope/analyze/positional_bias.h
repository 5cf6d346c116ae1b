// Positional-bias analysis (docs/design.md#positional-bias, paper §3): the attention positional bias A^c, its
// gradients at initialisation for RoPE vs NoPE (Figure 3), the constant-sequence check of
// Proposition 3.1, attention maps of single heads, and RoPE-scaling factors γ_m (Figure 6). Results come
// as plain structs, JSON/CSV text and plot::Figure / plot::Heatmap values for drope-analyze to save.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "drope/config/model_config.h"
#include "drope/model/transformer.h"
#include "drope/plot/plot.h"

namespace drope::analyze {

// ----- A^c -----------------------------------------------------------------------------------------

// The two weight patterns of Figure 3. Rows are indexed i = 1..T (1-based, as in the paper); every row
// sums to zero over j ≤ i and is zero above the diagonal.
//  - diagonal:       c_ii = 1, c_ij = −1/(i−1) for j < i; row 1 is zero (no j < 1 to balance c_11).
//  - previous-token: c_{i,i−1} = 1, c_ij = −1/(i−1) for the other i−1 keys j ≤ i (j ≠ i−1, so j = i is
//                    one of them); row 1 is zero. Row 2 is (1, −1): c_21 = 1, c_22 = −1.
enum class BiasWeights { kDiagonal, kPreviousToken };
const char* bias_weights_name(BiasWeights w);  // "diagonal" | "previous-token"

// c as a (T, T) tensor of `dtype`.
torch::Tensor bias_weights(BiasWeights w, int64_t T, torch::ScalarType dtype = torch::kDouble);

// A^c(α) = (1/T) Σ_i Σ_{j≤i} c_ij α_ij over the last two dims: probs (..., T, T), c (T, T) → (...).
// Differentiable.
torch::Tensor positional_bias(const torch::Tensor& probs, const torch::Tensor& c);

// A^c of every head of `layer` for token ids (1, T): (H), differentiable w.r.t. the model parameters.
torch::Tensor layer_bias(DecoderLM& model, const torch::Tensor& ids, BiasWeights w, int64_t layer);

// ----- gradients of A^c (Figure 3) ----------------------------------------------------------------

// One head's A^c and the norms of its gradient.
struct HeadBiasGrad {
  double bias = 0;      // A^c
  double grad_wq = 0;   // ‖∂A^c/∂W_Q‖, W_Q = the layer's q_proj.weight
  double grad_wk = 0;   // ‖∂A^c/∂W_K‖, W_K = the layer's k_proj.weight
  double grad_all = 0;  // ‖∇_θ A^c‖ over every parameter of the model
};
using HeadGrid = std::vector<std::vector<HeadBiasGrad>>;  // [layer][head]

// For one sequence ids (1, T): one HeadGrid per entry of `weights`, from a single forward pass and one
// autograd::grad call per (weights, layer, head).
std::vector<HeadGrid> head_bias_gradients(DecoderLM& model, const torch::Tensor& ids,
                                          const std::vector<BiasWeights>& weights);

// Mean, standard deviation (population) and extremes of a sample.
struct Spread {
  double mean = 0, std = 0, min = 0, max = 0;
};
Spread spread_of(const std::vector<double>& v);

// Per layer: statistics over the N·M (sequence, seed) samples of the mean over heads.
struct LayerBiasGrad {
  Spread bias, grad_wq, grad_wk, grad_all;
};

struct BiasGradCurve {
  BiasWeights weights = BiasWeights::kDiagonal;
  std::vector<LayerBiasGrad> layers;
};

struct BiasGradOptions {
  int64_t num_seqs = 8;          // N input sequences per seed
  int64_t num_seeds = 3;         // M seeds
  int64_t seq_len = 128;         // T
  bool reinit = true;            // re-initialise the weights with each seed (false: seeds vary inputs only)
  std::string text;              // byte tokens to cut random windows from; empty = uniform random tokens
};

struct BiasGradReport {
  std::string model;             // display name
  std::string source;            // where it came from (preset, config file or model directory)
  ModelConfig config;
  BiasGradOptions options;       // as run (text left empty)
  bool from_text = false;
  std::vector<BiasGradCurve> curves;  // diagonal, previous-token
};

// Runs the study on `model` (re-initialised per seed when options.reinit). Float32 unless the model is
// float64.
BiasGradReport bias_grad_study(DecoderLM& model, const std::string& name, const std::string& source,
                               const BiasGradOptions& options);

// Token ids (1, T): uniform over the vocabulary, or a random window of the byte tokens `text`, from `seed`.
torch::Tensor sample_tokens(int64_t vocab, int64_t T, uint64_t seed, const std::string& text = {});

// Byte-level tokens of a text file (ids 0..255, one byte each), the model vocabulary must hold them: the first
// `max_tokens` bytes, of which only those are read, or with 0 the whole file (which must fit in memory).
std::string byte_tokens(const std::string& path, int64_t vocab, int64_t max_tokens = 0);

std::string bias_grad_json(const std::vector<BiasGradReport>& reports);
std::string bias_grad_csv(const std::vector<BiasGradReport>& reports);
std::string bias_grad_table(const std::vector<BiasGradReport>& reports);  // for the terminal
// Figure 3: panels diagonal / off-diagonal, x = layer, y = mean ‖∇_θ A^c‖ (log), band = ±1 std.
plot::Figure bias_grad_figure(const std::vector<BiasGradReport>& reports);

// ----- Proposition 3.1 ----------------------------------------------------------------------------

// Quantities of Proposition 3.1 on a sequence of one repeated token. NoPE: all zero up to rounding.
// RoPE: attention deviation, A^c and its W_Q/W_K gradients non-zero; outputs still constant (the
// paper's remark after the proof: part (4) holds for RoPE too), and therefore the loss gradients
// w.r.t. W_Q/W_K vanish for RoPE as well: every value vector is the same, so outputs do not depend on α.
struct ConstantSequenceReport {
  int64_t token = 0, seq_len = 0;
  std::vector<double> attention_deviation;  // per layer: max over heads, i, j ≤ i of |α_ij − 1/i|
  double max_attention_deviation = 0;       // over all layers
  double bias = 0;                          // A = Σ over layers and heads of the diagonal A^c
  double bias_grad_wq = 0;                  // ‖∂A/∂W_Q‖ over every layer's q_proj.weight
  double bias_grad_wk = 0;                  // ‖∂A/∂W_K‖
  double loss_grad_wq = 0;                  // ‖∂L/∂W_Q‖, L = next-token cross-entropy on the sequence
  double loss_grad_wk = 0;                  // ‖∂L/∂W_K‖
  double output_spread = 0;                 // max over positions i of max |h_i − h_1| (final hidden states)
};

// Runs in the model's dtype (float64 gives zeros up to ~1e-16 for NoPE).
ConstantSequenceReport constant_sequence_check(DecoderLM& model, int64_t token, int64_t T);
std::string constant_sequence_json(const ConstantSequenceReport& r, const std::string& model);
std::string constant_sequence_text(const ConstantSequenceReport& r, const std::string& model);

// ----- attention maps -----------------------------------------------------------------------------

// Throws drope::Error unless 0 <= layer < num_layers and 0 <= head < num_heads, naming the valid range.
void check_layer_head(const ModelConfig& cfg, int64_t layer, int64_t head);

// α of one head for ids (1, T): (T, T) float64.
torch::Tensor attention_map(DecoderLM& model, const torch::Tensor& ids, int64_t layer, int64_t head);

// Heatmap of a (T, T) attention map; cells above the causal diagonal are blank. `labels` (T or empty)
// name the tokens.
plot::Heatmap attention_heatmap(const torch::Tensor& map, const std::vector<std::string>& labels,
                                const std::string& title, bool log_color);

// Printable labels for byte tokens (e.g. "a", "␣", "\n").
std::vector<std::string> byte_labels(const torch::Tensor& ids);

// ----- attention to a needle (Figures 7–8) --------------------------------------------------------

// Where the last query of a prompt looks, around a needle at tokens [needle_begin, needle_end): the
// attention of the final position averaged over heads, per layer and over layers, on keys
// [needle_begin − window, needle_end + window), and the total mass on the needle per layer.
struct NeedleAttention {
  std::string label;
  int64_t needle_begin = 0, needle_end = 0, prompt_tokens = 0;
  std::vector<int64_t> key_offset;                 // key position − needle_begin, for each key in the window
  std::vector<std::vector<double>> per_layer;      // [layer][key]: mean over heads
  std::vector<double> mean;                        // [key]: mean over layers
  std::vector<double> needle_mass;                 // [layer]: Σ over needle keys of the head-mean attention
  double mean_needle_mass = 0;                     // over layers
  double uniform_mass = 0;                         // (needle_end − needle_begin) / prompt_tokens: no preference
};
NeedleAttention needle_attention(DecoderLM& model, const torch::Tensor& ids, int64_t needle_begin, int64_t needle_end,
                                 int64_t window, const std::string& label);
std::string needle_attention_json(const std::vector<NeedleAttention>& runs);
std::string needle_attention_csv(const std::vector<NeedleAttention>& runs);
// Two panels: attention of the last query around the needle (mean over layers, log y), needle mass per layer.
plot::Figure needle_attention_figure(const std::vector<NeedleAttention>& runs);

// ----- RoPE scaling (Figure 6) --------------------------------------------------------------------

// γ_m = ω'_m/ω_m of one method at one factor, from rope_frequencies (the function the model uses).
struct GammaCurve {
  std::string type;
  double factor = 1;
  std::vector<double> gamma;  // per pair index m = 0..d/2−1
  double attention_factor = 1;
};

std::vector<GammaCurve> scaling_gammas(double theta, int64_t head_dim, int64_t train_length,
                                       const std::vector<std::string>& types, const std::vector<double>& factors,
                                       const RopeScalingConfig& base);
std::string gamma_csv(const std::vector<GammaCurve>& curves);
// One panel per factor, one line per method.
plot::Figure gamma_figure(const std::vector<GammaCurve>& curves, double theta, int64_t head_dim, int64_t train_length);

}  // namespace drope::analyze
