// Flags whose text a function turns into the options field they bind to: an enum through its
// name table (base/enum_names.h), a size with units, a list of schemes. The function's
// InvalidInput becomes CLI11's parse error with the same message (exit status 2).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <utility>

#include "hydraulis/base/enum_names.h"
#include "hydraulis/base/error.h"

namespace hydraulis::tools {

// Binds `name` to `field` (which must outlive the parse) through `parse(text)`; the help
// shows `default_text` as the default.
template <typename T, typename Parse>
CLI::Option* AddParsedOption(CLI::App* app, const std::string& name, T& field, Parse parse,
                             const std::string& help, const std::string& default_text) {
  return app
      ->add_option_function<std::string>(
          name,
          [&field, parse = std::move(parse)](const std::string& text) {
            try {
              field = parse(text);
            } catch (const InvalidInput& e) {
              throw CLI::ValidationError(e.what());
            }
          },
          help)
      ->default_str(default_text);
}

// An enum flag parsed by its name table (which must outlive the parse), named in messages
// ("--dtype: expected f32 or bf16, got 'x'"); the help lists the names after `help`.
template <typename E, std::size_t N>
CLI::Option* AddEnumOption(CLI::App* app, const std::string& flag, E& field,
                           const EnumNames<E, N>& names, const std::string& help) {
  return AddParsedOption(
      app, flag, field,
      [&names, flag](const std::string& text) { return ParseName(text, names, flag); },
      help + ": " + NameList(names), std::string(NameOf(field, names)));
}

}  // namespace hydraulis::tools
