#include "layers/moda_config.h"

#include <algorithm>

#include "core/error.h"
#include "core/suggest.h"

namespace fathom {

const std::vector<std::string>& moda_variant_names() {
  static const std::vector<std::string> names{"none", "attn_kv", "attn_kv+ffn_kv", "extra_attn_kv+ffn_kv"};
  return names;
}

const std::vector<std::string>& depth_key_names() {
  static const std::vector<std::string> names{"writer", "reader"};
  return names;
}

const std::string& name_of(MoDAVariant variant) { return moda_variant_names()[size_t(variant)]; }
const std::string& name_of(DepthKey key) { return depth_key_names()[size_t(key)]; }

MoDAVariant parse_moda_variant(const std::string& name) {
  return MoDAVariant(choice_index(name, moda_variant_names(), "moda.variant"));
}

DepthKey parse_depth_key(const std::string& name) {
  return DepthKey(choice_index(name, depth_key_names(), "moda.depth_key"));
}

void MoDAConfig::validate() const {
  FATHOM_CHECK(max_slots >= 0, "moda.max_slots must be >= 0 (0 reads every slot), got ", max_slots);
}

int64_t moda_first_read_slot(int64_t written, int64_t max_slots) {
  return max_slots > 0 ? std::max<int64_t>(0, written - max_slots) : 0;
}

}  // namespace fathom
