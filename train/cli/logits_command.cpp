// fathom logits: a model's full-forward logits on a text, written as safetensors (ids I32 [1, T] and
// logits F32 [1, T, vocab]), so another implementation of the model can be checked against fathom's
// (the remote code of an HF export: scripts/check_hf_export.py). Always fp32.
#include <iostream>
#include <memory>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/file_io.h"
#include "data/tokenizer.h"
#include "train/cli/commands.h"
#include "train/cli/device_select.h"
#include "train/cli/model_text_input.h"
#include "train/generate/inference_model.h"

namespace fathom {

void add_logits_command(CLI::App& app) {
  struct Args {
    ModelTextInput input;
    std::string out, device = "cpu", routing = "topk";
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "Write a model's logits on a text (fp32) to a safetensors file");
  args->input.add_options(cmd, "text");
  cmd->add_option("--out", args->out, "The safetensors file to write (ids and logits)")->required();
  cmd->add_option("--device", args->device, "cpu, cuda or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--routing", args->routing,
                  "MoD: each sequence's top-k as in training and `fathom eval` (topk), or each token by the causal "
                  "router as generation does (causal)")
      ->check(CLI::IsMember({"topk", "causal"}))
      ->capture_default_str();
  cmd->callback([args] {
    const std::string text = args->input.text();
    const ModelFiles loaded = read_model_files(args->input.checkpoint);
    const std::vector<uint32_t> encoded = args->input.tokenizer_for(loaded)->encode(text);
    FATHOM_CHECK(!encoded.empty(), "logits: the text has no tokens");
    const Device device = resolve_device(args->device, "--device");
    const InferenceModel inference(loaded.config, loaded.weights, loaded.origin, device, false);
    const std::vector<int32_t> ids(encoded.begin(), encoded.end());
    const Tensor ids_tensor = Tensor::from_vector(ids, {1, int64_t(ids.size())});
    NoGrad no_grad;
    ForwardOptions options;
    options.as_decoded = args->routing == "causal";
    const Decoder& model = inference.decoder();
    const Variable hidden = model.forward(ids_tensor.to(device), options).hidden;
    const Tensor logits = linear(hidden, model.head_weight()).value().to(Device::cpu()).to(DType::f32);
    write_safetensors(args->out, {{"ids", ids_tensor}, {"logits", logits}}, {{"format", "pt"}});
    std::cout << "wrote the logits of " << ids.size() << " tokens to " << args->out << "\n";
  });
}

}  // namespace fathom
