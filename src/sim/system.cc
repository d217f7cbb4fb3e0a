#include "hydraulis/sim/system.h"

#include "hydraulis/base/enum_names.h"

namespace hydraulis {
namespace {

constexpr EnumNames<System, 7> kSystemNames{{{System::kPadding, "padding"},
                                             {System::kStaticFixed, "static-fixed"},
                                             {System::kStaticBalanced, "static-balanced"},
                                             {System::kStaticCp, "static-cp"},
                                             {System::kDynamicCp, "dynamic-cp"},
                                             {System::kPublished, "published"},
                                             {System::kOurs, "ours"}}};

}  // namespace

std::string SystemName(System system) { return std::string(NameOf(system, kSystemNames)); }

System ParseSystem(std::string_view name, std::string_view what) {
  return ParseName(name, kSystemNames, what);
}

}  // namespace hydraulis
