// Opening a trained model for inference (fathom eval, fathom generate, the generation benchmark): its
// files from a fathom checkpoint or run folder, or a HuggingFace folder, and the model with its
// weights on a device (bf16 compute copy on a GPU), with no gradients or optimizer state.
#pragma once
#include <string>

#include "core/safetensors.h"
#include "layers/decoder.h"
#include "layers/parameter_arena.h"

namespace fathom {

// What a model source holds: its config and weights under fathom's names, the tokenizer its recipe
// names ("" for a HuggingFace folder without tokenizer.json) and where it came from, for messages.
struct ModelFiles {
  ModelConfig config;
  TensorMap weights;
  std::string tokenizer;
  std::string origin;
};

// `hf:DIR`, or a checkpoint folder, or a run folder (its latest checkpoint); optimizer.safetensors is
// not needed.
ModelFiles read_model_files(const std::string& spec);

class InferenceModel {
 public:
  // bf16: a BF16 compute copy of the weights (GPU mixed precision), so activations are BF16.
  InferenceModel(const ModelConfig& config, const TensorMap& weights, const std::string& origin, Device device,
                 bool bf16);
  const Decoder& decoder() const { return model_; }
  Device device() const { return device_; }
  DType activation_dtype() const { return arena_.has_compute_copy() ? DType::bf16 : DType::f32; }

 private:
  Device device_;
  Decoder model_;
  ParameterArena arena_;
};

}  // namespace fathom
