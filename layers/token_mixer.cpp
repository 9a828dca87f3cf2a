#include "layers/token_mixer.h"

#include "core/error.h"

namespace fathom {

void MixerCache::set_lengths(const std::vector<int64_t>&) {
  FATHOM_FAIL("this decoding state cannot be replayed (replayable() is false), so its length is not set from outside");
}

void MixerCache::copy_sequence(int64_t, const MixerCache&) {
  FATHOM_FAIL(
      "this layer kind's decoding state cannot take a sequence prefilled alone (MixerCache::copy_sequence), so it "
      "decodes one prompt at a time; a batch of different prompts needs it");
}

LayerCost& LayerCost::operator+=(const LayerCost& other) {
  saved_elements += other.saved_elements;
  rebuilt_elements += other.rebuilt_elements;
  saved_stats += other.saved_stats;
  depth_elements += other.depth_elements;
  depth_stats += other.depth_stats;
  weight_flops += other.weight_flops;
  extra_flops += other.extra_flops;
  return *this;
}

}  // namespace fathom
