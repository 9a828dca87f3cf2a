// The teacher of a distillation (DESIGN.md 4.4): a fathom checkpoint or HuggingFace folder loaded for
// inference, frozen, whose forwards run under NoGrad and so save nothing for backward.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "train/generate/inference_model.h"

namespace fathom {

// What the teacher gives a student's micro-batch.
struct TeacherTargets {
  Tensor logits;        // [B * T, vocab], when asked
  Tensor layer_output;  // the asked layer's output [B, T, d], when asked
};

class Teacher {
 public:
  // spec: "checkpoint:DIR" or "hf:DIR". A source that is not a decoder fathom can load is an error
  // naming distill.teacher.
  Teacher(const std::string& spec, Device device, bool bf16);

  const ModelFiles& files() const { return files_; }
  const Decoder& decoder() const { return model_->decoder(); }
  Device device() const { return model_->device(); }
  DType activation_dtype() const { return model_->activation_dtype(); }

  // One frozen forward over ids [B, T]: the logits when `logits`, and layer `layer`'s output when >= 0.
  TeacherTargets targets(const Tensor& ids, bool logits, int64_t layer) const;
  // Each layer's mean attention entropy on ids (nullopt for kinds without attention).
  std::vector<std::optional<double>> attention_entropy(const Tensor& ids) const;

 private:
  ModelFiles files_;
  std::unique_ptr<InferenceModel> model_;
};

}  // namespace fathom
