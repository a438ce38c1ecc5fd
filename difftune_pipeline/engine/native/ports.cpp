#include "ports.h"

#include <set>

using namespace llvm;

namespace dt {

PortUses explicitUses(const EngineImpl &E, const MCSchedClassDesc &D) {
  // Undo the expansion exactly as InstrBuilder does: subtract from each group
  // the explicit cycles of the smaller resources it contains.
  PortUses Uses;
  for (unsigned I = 0; I < D.NumWriteProcResEntries; ++I) {
    const MCWriteProcResEntry &W = E.WPR[D.WriteProcResIdx + I];
    if (wprCycles(W)) Uses.push_back({W.ProcResourceIdx, (int)wprCycles(W)});
  }
  E.sortByMask(Uses);
  for (size_t I = 0; I < Uses.size(); ++I)
    for (size_t J = I + 1; J < Uses.size(); ++J)
      if (E.containedIn(Uses[I].first, Uses[J].first)) Uses[J].second -= Uses[I].second;
  return Uses;
}

std::vector<MCWriteProcResEntry> expandUses(const EngineImpl &E, const MCSchedClassDesc &Orig,
                                            PortUses Uses) {
  // Re-expand: a group's stored cycles include those of the resources inside it.
  E.sortByMask(Uses);
  std::vector<MCWriteProcResEntry> W;
  for (size_t J = 0; J < Uses.size(); ++J) {
    int Expanded = Uses[J].second;
    for (size_t I = 0; I < J; ++I)
      if (E.containedIn(Uses[I].first, Uses[J].first)) Expanded += Uses[I].second;
    if (!Expanded) continue;
    MCWriteProcResEntry X{};
    X.ProcResourceIdx = Uses[J].first;
    for (unsigned K = 0; K < Orig.NumWriteProcResEntries; ++K)  // keep acquire cycles
      if (E.WPR[Orig.WriteProcResIdx + K].ProcResourceIdx == X.ProcResourceIdx)
        X = E.WPR[Orig.WriteProcResIdx + K];
    setWprCycles(X, Expanded);
    W.push_back(X);
  }
  return W;
}

void checkNesting(const EngineImpl &E, const std::string &Where, unsigned Class,
                  const PortUses &Uses) {
  // MCA issues a row's resources one after another; with two partially
  // overlapping groups it can pick a unit the other one needed and crash.
  // Resources with cycles must be pairwise nested or disjoint, unless LLVM's
  // own row for this class already pairs them.
  std::set<unsigned> Own;
  for (const auto &[Res, Cy] : explicitUses(E, *E.SM->getSchedClassDesc(Class)))
    if (Cy) Own.insert(Res);
  for (size_t I = 0; I < Uses.size(); ++I)
    for (size_t J = I + 1; J < Uses.size(); ++J) {
      const unsigned A = Uses[I].first, B = Uses[J].first;
      if (Uses[I].second && Uses[J].second &&
          partiallyOverlap(E.normalized(A), E.normalized(B)) && !(Own.count(A) && Own.count(B)))
        invalid(Where, "ports: '" + std::string(E.resourceName(A)) + "' and '" +
                           E.resourceName(B) +
                           "' partially overlap (give cycles to nested or disjoint resources only)");
    }
}

std::vector<std::pair<std::string, int>> Engine::nested_ports(
    const std::vector<std::pair<std::string, int>> &ports,
    const std::vector<std::string> &allowed) const {
  const EngineImpl &E = *impl_;
  std::vector<unsigned> Res;  // resource index of each port
  for (const auto &[Name, Cy] : ports) {
    auto It = E.ResourceByName.find(Name);
    if (It == E.ResourceByName.end())
      invalid("nested_ports", "no processor resource '" + Name + "' in the " + E.Mcpu + " model");
    Res.push_back(It->second);
  }
  const std::set<std::string> Allowed(allowed.begin(), allowed.end());
  std::vector<size_t> Order;  // ports with cycles, most cycles first
  for (size_t I = 0; I < ports.size(); ++I)
    if (ports[I].second > 0) Order.push_back(I);
  std::stable_sort(Order.begin(), Order.end(),
                   [&](size_t A, size_t B) { return ports[A].second > ports[B].second; });
  std::vector<size_t> Kept;
  for (size_t I : Order)
    if (std::none_of(Kept.begin(), Kept.end(), [&](size_t K) {
          return partiallyOverlap(E.normalized(Res[I]), E.normalized(Res[K])) &&
                 !(Allowed.count(ports[I].first) && Allowed.count(ports[K].first));
        }))
      Kept.push_back(I);
  std::vector<std::pair<std::string, int>> Out;  // what is not kept gets 0 cycles
  for (const auto &[Name, Cy] : ports) Out.push_back({Name, 0});
  for (size_t K : Kept) Out[K].second = ports[K].second;
  return Out;
}

}  // namespace dt
