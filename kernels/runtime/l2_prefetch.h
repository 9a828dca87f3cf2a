// Asking L2 for the weights a later kernel of a decoding step reads, from a kernel that waits on latency
// meanwhile (attention over a short cache): the memory system streams those bytes in that window instead of
// idling, and the later GEMMs (o_proj, then gate and up) find the first of their weights in L2. A hint: the
// asking kernel loads nothing into registers and writes nothing, so no value changes, only when bytes move.
// Whether a step asks is FATHOM_DECODE_L2_PREFETCH (below); how much, what else L2 must hold meanwhile (L2Prefetch).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "kernels/runtime/kernel_choice.h"

namespace fathom {

// The weights a sublayer reads after the kernel that may ask for them, in the order it reads them; the tensors
// of one group are read at once (gate and up), so they share what is asked for equally.
using WeightGroups = std::vector<std::vector<Tensor>>;

constexpr int kL2PrefetchMaxRanges = 4;

// Byte ranges for L2, each 16-byte aligned and a multiple of 16 bytes long (a bulk prefetch's unit), planned for
// `room` bytes of L2; a kernel argument. The asking kernel shares the room with its own reads (a cache, at lengths
// only the device knows in a CUDA graph): it asks for each range's same fraction of `room` less those reads, none
// when they fill the room, so that what it asks for is still in L2 when the reader comes (l2_prefetch.cuh).
struct L2Prefetch {
  const void* data[kL2PrefetchMaxRanges] = {};
  uint64_t bytes[kL2PrefetchMaxRanges] = {};
  int count = 0;
  uint64_t total = 0, room = 0;
};

// Half a device's L2: the room a plan is made for, the other half left to whatever else the step reads.
constexpr uint64_t l2_prefetch_room(uint64_t l2_bytes) { return l2_bytes / 2; }

// The ranges for at most `room` bytes of `groups`: whole groups while they fit, then equal leading parts of each
// tensor of the first group that does not, and nothing after it (a later group's bytes would only be read after
// that group's). A group that would take the ranges past kL2PrefetchMaxRanges, or holds a tensor not 16-byte
// aligned, ends the plan there.
L2Prefetch plan_l2_prefetch(const WeightGroups& groups, uint64_t room);

// FATHOM_DECODE_L2_PREFETCH=on|off, read at the first use (unset: off until its benchmark pays), unless
// set_decode_l2_prefetch replaced it.
Toggle decode_l2_prefetch();
void set_decode_l2_prefetch(Toggle choice);

}  // namespace fathom
