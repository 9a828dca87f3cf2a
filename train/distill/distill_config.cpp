#include "train/distill/distill_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "core/error.h"
#include "layers/dsla.h"

namespace fathom {

namespace {

std::optional<int64_t> whole_number(const std::string& text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> number(const std::string& text) {
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

// The plan, or the problem: one pass that both distill_problem and distill_plan read.
struct Checked {
  DistillPlan plan;
  std::optional<DistillProblem> problem;
};

// "[i] ", where an error points into a list. Appended piece by piece: GCC 12 warns (-Wrestrict, a
// false positive) on a literal + a temporary string.
std::string list_place(size_t i) {
  std::string place = "[";
  place += std::to_string(i);
  place += "] ";
  return place;
}

Checked check(const Recipe& recipe) {
  const Recipe::Distill& d = recipe.distill;
  const int64_t n = recipe.model.n_layers;
  Checked out;
  auto fail = [&](const std::string& key, const std::string& message) {
    out.problem = DistillProblem{key, key + ": " + message};
    return out;
  };
  if (d.teacher.empty()) return fail("distill.teacher", "missing: give the teacher as checkpoint:DIR or hf:DIR");
  DistillPlan& plan = out.plan;
  if (d.order.size() == 1 && d.order[0] == "entropy") {
    plan.order = DistillOrder::entropy;
  } else if (d.order.size() == 1 && d.order[0] == "sensitivity") {
    plan.order = DistillOrder::sensitivity;
    if (recipe.data.validation.empty())
      return fail("distill.order", "sensitivity ranks layers by validation loss; give data.validation");
  } else {
    plan.order = DistillOrder::list;
    std::set<int64_t> seen;
    for (size_t i = 0; i < d.order.size(); ++i) {
      const std::string place = list_place(i);
      const std::optional<int64_t> layer = whole_number(d.order[i]);
      if (!layer)
        return fail("distill.order", place + "'" + d.order[i] +
                                         "' is no layer index; the order is entropy, sensitivity or a list of layer "
                                         "indices");
      if (*layer < 0 || *layer >= n)
        return fail("distill.order", place + "layer " + d.order[i] + " is out of range: the teacher has " +
                                         std::to_string(n) + " layers (0.." + std::to_string(n - 1) + ")");
      if (!seen.insert(*layer).second)
        return fail("distill.order", place + "layer " + d.order[i] + " is listed twice; each layer converts once");
      plan.listed.push_back(*layer);
    }
  }
  const int64_t available = plan.order == DistillOrder::list ? int64_t(plan.listed.size()) : n;
  if (d.layers.empty()) {
    if (plan.order != DistillOrder::list)
      return fail("distill.layers", "missing: give how many layers to convert (2) or fractions ([0.25, 0.5])");
    plan.count = available;
  } else if (d.layers.size() == 1 && whole_number(d.layers[0])) {
    plan.count = *whole_number(d.layers[0]);
    if (plan.count < 1 || plan.count > available)
      return fail("distill.layers", "converts " + d.layers[0] + " layers; give 1.." + std::to_string(available) +
                                        (plan.order == DistillOrder::list ? " (the layers distill.order lists)"
                                                                          : " (the teacher's layers)"));
  } else {
    for (size_t i = 0; i < d.layers.size(); ++i) {
      const std::string place = list_place(i);
      const std::optional<double> f = number(d.layers[i]);
      if (!f || !std::isfinite(*f) || *f <= 0 || *f > 1)
        return fail("distill.layers", place + "'" + d.layers[i] + "' must be a fraction in (0, 1]");
      const int64_t k = int64_t(std::llround(*f * double(n)));
      if (k < 1)
        return fail("distill.layers",
                    place + d.layers[i] + " of " + std::to_string(n) + " layers converts no layer; give a larger one");
      if (k > available)
        return fail("distill.layers", place + d.layers[i] + " converts " + std::to_string(k) +
                                          " layers, more than the " + std::to_string(available) +
                                          " distill.order lists");
      if (std::find(plan.named_models.begin(), plan.named_models.end(), k) != plan.named_models.end())
        return fail("distill.layers", place + d.layers[i] + " converts " + std::to_string(k) +
                                          " layers, as an earlier fraction does; give distinct fractions");
      plan.named_models.push_back(k);
    }
    std::sort(plan.named_models.begin(), plan.named_models.end());
    plan.count = plan.named_models.back();
  }
  if (plan.named_models.empty())
    for (int64_t k = 1; k <= plan.count; ++k) plan.named_models.push_back(k);
  if (std::all_of(d.loss.begin(), d.loss.end(), [](const auto& term) { return term.second == 0; }))
    return fail("distill.loss", "every term has weight 0; give ce, logit_kl, layer_align or gate_cos a weight > 0");
  const auto gate_cos = d.loss.find(kGateCosLoss);
  if (gate_cos != d.loss.end() && gate_cos->second > 0 && recipe.model.options.get<DslaConfig>().states != 2)
    return fail("distill.loss", "gate_cos compares the two states' gates; dsla.states is " +
                                    std::to_string(recipe.model.options.get<DslaConfig>().states));
  return out;
}

}  // namespace

std::optional<DistillProblem> distill_problem(const Recipe& recipe) { return check(recipe).problem; }

DistillPlan distill_plan(const Recipe& recipe) {
  Checked checked = check(recipe);
  if (checked.problem) FATHOM_FAIL(checked.problem->message);
  return checked.plan;
}

}  // namespace fathom
