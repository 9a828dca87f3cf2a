// The options of the layer kinds a model uses, each kind's own struct (DslaConfig, ModConfig, ...),
// held by type so that ModelConfig names no kind. A kind's options are its struct's defaults until set;
// a struct that is absent and one at its defaults compare equal. Copies are deep: configs are values.
#pragma once
#include <map>
#include <memory>
#include <typeindex>

namespace fathom {

class KindOptions {
 public:
  KindOptions() = default;
  KindOptions(const KindOptions& other) { *this = other; }
  KindOptions& operator=(const KindOptions& other);
  KindOptions(KindOptions&&) noexcept = default;
  KindOptions& operator=(KindOptions&&) noexcept = default;

  // The options of kind T: set ones, or T's defaults.
  template <typename T>
  const T& get() const {
    const auto it = slots_.find(typeid(T));
    static const T defaults{};
    return it == slots_.end() ? defaults : *static_cast<const T*>(it->second.value.get());
  }
  // T's options to change (made at T's defaults on first use).
  template <typename T>
  T& get() {
    Slot& slot = slots_[typeid(T)];
    if (!slot.value) slot = make_slot<T>();
    return *static_cast<T*>(slot.value.get());
  }

  bool operator==(const KindOptions& other) const;

 private:
  struct Slot {
    std::shared_ptr<void> value;
    std::shared_ptr<void> (*copy)(const void*) = nullptr;
    bool (*equal)(const void*, const void*) = nullptr;  // an absent side compares as the defaults
  };
  template <typename T>
  static Slot make_slot() {
    return {std::make_shared<T>(),
            [](const void* v) -> std::shared_ptr<void> { return std::make_shared<T>(*static_cast<const T*>(v)); },
            [](const void* a, const void* b) {
              static const T defaults{};
              return *static_cast<const T*>(a ? a : &defaults) == *static_cast<const T*>(b ? b : &defaults);
            }};
  }
  std::map<std::type_index, Slot> slots_;
};

}  // namespace fathom
