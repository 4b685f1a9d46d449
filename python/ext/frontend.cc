// The front ends' shared part (src/frontend): the demo report that `tokpos
// demo` prints, its defaults, and the parameters' rules, so python -m tokpos
// checks its options by the rules the CLI and tokpos serve use, with the same
// messages, and copies no default; and the lab kits (`python -m tokpos lab`).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "bind.h"
#include "frontend/demo_report.h"
#include "frontend/lab.h"
#include "frontend/messages.h"
#include "frontend/params.h"

namespace tokpos::python {
namespace {

namespace fe = tokpos::frontend;

std::string demo_report(const std::string& text, int64_t vocab_size, int64_t dim, int64_t max_context,
                        uint64_t seed, double base, bool json, const std::string& lang, const std::string& weights,
                        const std::string& preset, const std::vector<std::string>& map, bool dim_given,
                        bool context_given) {
  fe::DemoOptions o;
  o.text = text;
  o.vocab_size = vocab_size;
  o.dim = dim;
  o.max_context = max_context;
  o.seed = seed;
  o.base = base;
  o.json = json;
  o.lang = lang;
  o.weights = weights;
  o.preset = preset;
  o.map = map;
  o.dim_given = dim_given;
  o.context_given = context_given;
  std::ostringstream os;
  {
    nb::gil_scoped_release release;
    fe::run_demo(o, os);
  }
  return os.str();
}

// The demo report's catalogue as (key, en, zh) triples.
std::vector<std::vector<std::string>> demo_messages() {
  std::vector<std::vector<std::string>> out;
  for (const fe::Message& m : fe::demo_messages()) out.push_back({std::string(m.key), std::string(m.en), std::string(m.zh)});
  return out;
}

// The integer rules python -m tokpos takes, by the name its option has.
const fe::IntParam* int_rule(const std::string& name) {
  for (const fe::IntParam* p : {&fe::kDim, &fe::kContext, &fe::kVocab}) {
    if (name == p->name) return p;
  }
  return nullptr;
}

// text checked by the rule of parameter `name`: its value, or ValueError
// with the rule's message.
nb::object parse_param(const std::string& name, const std::string& text) {
  if (const fe::IntParam* p = int_rule(name)) return nb::int_(fe::parse(*p, text));
  if (name == fe::kSeed) return nb::cast(fe::parse_seed(text));
  if (name == fe::kBase.name) return nb::float_(fe::parse(fe::kBase, text));
  if (name == "layout") return nb::str(layout_name(fe::parse_layout_param(text)));
  throw Error(Status::kInvalidArgument, "tokpos: no rule for a parameter named '" + name + "'");
}

std::string describe_param(const std::string& name) {
  if (const fe::IntParam* p = int_rule(name)) return fe::describe(*p);
  if (name == fe::kSeed) return fe::describe_seed();
  if (name == fe::kBase.name) return fe::describe(fe::kBase);
  if (name == "layout") return "one of " + fe::join(fe::layout_names());
  throw Error(Status::kInvalidArgument, "tokpos: no rule for a parameter named '" + name + "'");
}

// The lab kits (frontend/lab.h), with the language as its name.
std::vector<std::string> write_lab(const std::string& kind, const std::string& dir, const std::string& lang,
                                   bool exercise) {
  return fe::write_lab(kind, dir, fe::parse_lang(lang), exercise);
}

std::string lab_report(const std::string& kind, const std::string& dir, const std::string& lang,
                       const std::vector<std::string>& written) {
  return fe::lab_report(kind, dir, fe::parse_lang(lang), written);
}

}  // namespace

void bind_frontend(nb::module_& m) {
  nb::class_<fe::DemoOptions>(m, "DemoOptions")
      .def(nb::init<>())
      .def_ro("text", &fe::DemoOptions::text)
      .def_ro("vocab_size", &fe::DemoOptions::vocab_size)
      .def_ro("dim", &fe::DemoOptions::dim)
      .def_ro("max_context", &fe::DemoOptions::max_context)
      .def_ro("seed", &fe::DemoOptions::seed)
      .def_ro("base", &fe::DemoOptions::base)
      .def_ro("json", &fe::DemoOptions::json);
  m.def("demo_report", &demo_report, nb::arg("text"), nb::arg("vocab_size"), nb::arg("dim"),
        nb::arg("max_context"), nb::arg("seed"), nb::arg("base"), nb::arg("json"), nb::arg("lang") = "",
        nb::arg("weights") = "", nb::arg("preset") = "", nb::arg("map") = std::vector<std::string>{},
        nb::arg("dim_given") = false, nb::arg("context_given") = false);
  m.def("demo_messages", &demo_messages);
  m.def("parse_param", &parse_param, nb::arg("name"), nb::arg("text"));
  m.def("describe_param", &describe_param, nb::arg("name"));
  m.def("layout_names", &fe::layout_names);
  m.def("write_lab", &write_lab, nb::arg("kind"), nb::arg("dir"), nb::arg("lang"), nb::arg("exercise"));
  m.def("lab_report", &lab_report, nb::arg("kind"), nb::arg("dir"), nb::arg("lang"), nb::arg("written"));
  m.def("lab_kinds", &fe::lab_kinds);
  m.def("default_lang", [] { return std::string(fe::lang_name(fe::default_lang())); });
}

}  // namespace tokpos::python
