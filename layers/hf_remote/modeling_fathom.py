"""transformers classes for a fathom export (loaded with trust_remote_code=True).

The math is fathom_core.py's; this file only adapts it to transformers: a config class, a
PreTrainedModel whose parameter names are fathom's, and the hooks `generate` calls. Generation keeps
a FathomCache of fathom_core (not a transformers Cache): the first forward reads the prompt into it,
later ones one token each, exactly as `fathom generate` decodes (MoD routes causally there).

A forward without a FathomCache reads whole sequences and returns no cache; MoD models then route
by config.mod_routing: "topk" (each sequence's top-k, as `fathom eval` does by default) or "causal"
(each token by the causal router, as generation does).
"""
import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

try:
    from transformers import PreTrainedConfig
except ImportError:  # transformers 4 names it PretrainedConfig
    from transformers import PretrainedConfig as PreTrainedConfig

from .fathom_core import MOD_ROUTINGS, FathomBody, FathomCache, FathomSpec, head_weight


class FathomConfig(PreTrainedConfig):
    model_type = "fathom"

    def __init__(self, vocab_size=None, hidden_size=None, intermediate_size=None, num_hidden_layers=None,
                 num_attention_heads=None, num_key_value_heads=None, rms_norm_eps=1e-6,
                 max_position_embeddings=4096, fathom=None, mod_routing="topk", **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.rms_norm_eps = rms_norm_eps
        self.max_position_embeddings = max_position_embeddings
        self.fathom = fathom
        self.mod_routing = mod_routing
        # A tied head multiplies by the embedding table inside the model; transformers ties nothing.
        kwargs["tie_word_embeddings"] = False
        super().__init__(**kwargs)

    def spec(self):
        if self.mod_routing not in MOD_ROUTINGS:
            raise ValueError(f"fathom config: mod_routing is {self.mod_routing!r}; the choices are topk, causal")
        return FathomSpec({key: getattr(self, key) for key in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "rms_norm_eps", "fathom")})


class FathomForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = FathomConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _tied_weights_keys = {}
    _no_split_modules = ["Block", "RoutedBlock"]

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # decoding keeps a FathomCache, made by prepare_inputs_for_generation

    def __init__(self, config):
        super().__init__(config)
        spec = config.spec()
        self.model = FathomBody(spec)
        self.lm_head = None if spec.tie_embeddings else torch.nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        pass  # every parameter comes from model.safetensors

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def new_cache(self, batch):
        return self.model.new_cache(batch)

    def forward(self, input_ids=None, attention_mask=None, past_key_values=None, labels=None, use_cache=None,
                return_dict=None, **kwargs):
        if input_ids is None:
            raise ValueError("fathom models read input_ids (inputs_embeds is not offered)")
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("fathom models read unpadded sequences only: the attention_mask holds padding; "
                             "pass sequences of one length (batch size 1 always is)")
        cache = past_key_values if isinstance(past_key_values, FathomCache) else None
        hidden = self.model(input_ids, cache, self.config.mod_routing)
        logits = F.linear(hidden, head_weight(self.model, self.lm_head)).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=cache)

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, use_cache=True,
                                      **kwargs):
        # The first call starts the cache and reads the whole prompt; later calls read the new tokens.
        cache = past_key_values if isinstance(past_key_values, FathomCache) else None
        if use_cache and cache is None:
            cache = self.new_cache(input_ids.shape[0])
        if cache is not None:
            input_ids = input_ids[:, cache.length:]
        return {"input_ids": input_ids, "past_key_values": cache, "attention_mask": attention_mask,
                "use_cache": use_cache}
