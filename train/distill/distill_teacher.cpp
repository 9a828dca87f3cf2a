#include "train/distill/distill_teacher.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "layers/attention.h"
#include "train/run/model_source.h"

namespace fathom {

namespace {

ModelFiles read_teacher(const std::string& spec) {
  try {
    const ModelSource source = parse_model_source(spec);
    return read_model_files(source.kind == ModelSource::Kind::hf ? spec : source.path);
  } catch (const Error& e) {
    FATHOM_FAIL("distill.teacher ", spec, ": ", e.message(), " (the teacher must be a decoder fathom can load)");
  }
}

}  // namespace

Teacher::Teacher(const std::string& spec, Device device, bool bf16) : files_(read_teacher(spec)) {
  model_ = std::make_unique<InferenceModel>(files_.config, files_.weights, files_.origin, device, bf16);
}

TeacherTargets Teacher::targets(const Tensor& ids, bool logits, int64_t layer) const {
  NoGrad no_grad;
  ForwardOptions options;
  options.layer_outputs = layer >= 0;
  const ModelOutput out = decoder().forward(ids.to(device()), options);
  TeacherTargets targets;
  if (logits) {
    const int64_t d = decoder().config().d_model;
    targets.logits = linear(reshape(out.hidden, {out.hidden.value().numel() / d, d}), decoder().head_weight()).value();
  }
  if (layer >= 0) {
    FATHOM_CHECK(layer < int64_t(out.layer_outputs.size()), "teacher: no layer ", layer);
    targets.layer_output = out.layer_outputs[size_t(layer)].value();
  }
  return targets;
}

std::vector<std::optional<double>> Teacher::attention_entropy(const Tensor& ids) const {
  NoGrad no_grad;
  ForwardOptions options;
  options.taps = {kAttentionEntropyTap};
  const ModelOutput output = decoder().forward(ids.to(device()), options);
  std::vector<std::optional<double>> entropy;
  for (const LayerMeasures& measures : output.measures) {
    const auto it = measures.find(kAttentionEntropyTap);
    entropy.push_back(it == measures.end() ? std::nullopt : std::optional<double>(it->second));
  }
  return entropy;
}

}  // namespace fathom
