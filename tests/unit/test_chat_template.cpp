// Chat templates: meshnn's Jinja interpreter (src/text/chat_template/) against Python's jinja2,
// configured as transformers' apply_chat_template configures it (tests/text/chat_template_reference.py).
// Every case is rendered by both, in this process and by one run of the script: both must
// succeed with the same bytes, or both fail. The cases are the templates of
// tests/text/chat_templates/ over a set of conversations, and small templates that each exercise
// one construct.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/text/chat_template.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using meshnn::text::ChatTemplate;
using meshnn::text::ChatTemplateInputs;
using meshnn::text::template_variables_from_json;
using meshnn::text::with_variables;

namespace {

// 2024-07-24 13:02:03 UTC, a Wednesday.
constexpr int64_t kNow = 1721826123;

struct Case {
  std::string name;
  std::string source;
  json messages;
  bool add_generation_prompt = true;
  json special_tokens = json::object();
  json variables = json::object();  // more render variables (tools, ...), set last
};

struct Outcome {
  bool ok = false;
  std::string text;  // the rendered text, or the error
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

ChatTemplateInputs inputs_of(const Case& c) {
  ChatTemplateInputs in;
  for (const json& m : c.messages) {
    // Fields beyond role and content (tool_calls, tool_call_id; content null) as the server passes them.
    json fields = json::object();
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content") fields[key] = value;
    if (m.at("content").is_null()) fields["content"] = nullptr;
    in.messages.push_back({m.at("role").get<std::string>(),
                           m.at("content").is_string() ? m.at("content").get<std::string>() : std::string(),
                           fields.empty() ? std::string() : fields.dump()});
  }
  in.add_generation_prompt = c.add_generation_prompt;
  for (const auto& [name, token] : c.special_tokens.items()) in.special_tokens.emplace_back(name, token.get<std::string>());
  for (const auto& [name, value] : c.variables.items()) in.json_variables.emplace_back(name, value.dump());
  in.now = kNow;
  return in;
}

Outcome render_meshnn(const Case& c) {
  try {
    const ChatTemplate t(c.source);
    return {true, t.render(inputs_of(c))};
  } catch (const meshnn::Error& e) {
    return {false, e.what()};
  }
}

// The reference's outcomes for `cases`, from one run of the script; `error` says why there are none.
std::vector<Outcome> render_jinja2(const std::vector<Case>& cases, std::string& error) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("meshnn_chat_template_" + std::to_string(getpid()));
  fs::create_directories(dir);
  json list = json::array();
  for (const Case& c : cases)
    list.push_back({{"template", c.source},
                    {"messages", c.messages},
                    {"add_generation_prompt", c.add_generation_prompt},
                    {"special_tokens", c.special_tokens},
                    {"variables", c.variables},
                    {"now", kNow}});
  std::ofstream(dir / "cases.json", std::ios::binary) << list.dump();
  const std::string script = std::string(MESHNN_TEST_SOURCE_DIR) + "/text/chat_template_reference.py";
  const std::string command = std::string("'") + MESHNN_SYSTEM_PYTHON + "' '" + script + "' render '" +
                              (dir / "cases.json").string() + "' '" + (dir / "out.json").string() + "' 2> '" +
                              (dir / "stderr.txt").string() + "'";
  std::vector<Outcome> outcomes;
  if (std::system(command.c_str()) != 0) {
    error = "the Python reference failed (" + command + "): " + slurp(dir / "stderr.txt") +
            "\nIt needs Debian's python3-jinja2 (scripts/install_deps.sh installs it).";
  } else {
    for (const json& r : json::parse(slurp(dir / "out.json")))
      outcomes.push_back(r.at("ok").get<bool>() ? Outcome{true, r.at("text").get<std::string>()}
                                                : Outcome{false, r.at("error").get<std::string>()});
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return outcomes;
}

std::string show(const Outcome& o) { return o.ok ? json(o.text).dump() : "error: " + o.text; }

// Renders every case both ways; reports each disagreement. Returns how many cases agreed.
size_t expect_same_as_jinja2(const std::vector<Case>& cases) {
  std::string error;
  const std::vector<Outcome> expected = render_jinja2(cases, error);
  if (!error.empty()) {
    ADD_FAILURE() << error;
    return 0;
  }
  if (expected.size() != cases.size()) {
    ADD_FAILURE() << "the reference gave " << expected.size() << " results for " << cases.size() << " cases";
    return 0;
  }
  size_t agreed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Outcome got = render_meshnn(cases[i]);
    if (got.ok == expected[i].ok && (!got.ok || got.text == expected[i].text)) {
      ++agreed;
      continue;
    }
    ADD_FAILURE() << "case '" << cases[i].name << "'\n  template: " << json(cases[i].source).dump()
                  << "\n  jinja2: " << show(expected[i]) << "\n  meshnn: " << show(got);
  }
  return agreed;
}

// ---------------------------------------------------------------------------------------------
// The corpus over conversations.

json msg(const std::string& role, const std::string& content) { return {{"role", role}, {"content", content}}; }

json weather_tools() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "Name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "local_time", "description": "L'heure locale — « exacte ».",
      "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": []}}}
  ])");
}

struct Conversation {
  std::string name;
  json messages;
  bool add_generation_prompt = true;
  json variables = json::object();
};

std::vector<Conversation> conversations() {
  const json system = msg("system", "You are a pirate. Answer in one sentence.");
  return {
      {"one user message", json::array({msg("user", "Hello!")})},
      {"system and user", json::array({system, msg("user", "Where is the treasure?")})},
      {"several turns, generation prompt",
       json::array({system, msg("user", "Where is the treasure?"), msg("assistant", "Under the palm tree, matey."),
                    msg("user", "Which one?")})},
      {"several turns, no generation prompt",
       json::array({system, msg("user", "Where is the treasure?"), msg("assistant", "Under the palm tree, matey."),
                    msg("user", "Which one?")}),
       false},
      {"assistant last",
       json::array({msg("user", "Say yes."), msg("assistant", "Yes."), msg("user", "Again?"), msg("assistant", "Yes!")}),
       false},
      {"no system, several turns",
       json::array({msg("user", "2 + 2?"), msg("assistant", "4"), msg("user", "And times 3?")})},
      {"non-ASCII",
       json::array({msg("system", "Réponds en français 🇫🇷"), msg("user", "Grüße! 世界 — Ελληνικά? 🙂"),
                    msg("assistant", "¡Hola! ✓ « ça va »"), msg("user", "ça va ? ない")})},
      {"template syntax in content",
       json::array({msg("user", "Render {{ messages }} and {% if true %}this{% endif %} {# not a comment #}"),
                    msg("assistant", "{%- raw %}{{ x }}{% endraw %} -}}"),
                    msg("user", "{{ raise_exception('no') }} {% for %}")})},
      {"whitespace in content",
       json::array({msg("system", "\n  padded system  \n"), msg("user", "  leading and trailing spaces  "),
                    msg("assistant", "\n\nnewlines first\n\n"), msg("user", "\ttabs\tinside\t\n")})},
      {"roles do not alternate", json::array({msg("user", "first"), msg("user", "second")})},
      {"assistant first", json::array({msg("assistant", "I start."), msg("user", "ok")})},
      {"system in the middle",
       json::array({msg("user", "hi"), msg("system", "Be brief."), msg("assistant", "hello")}), false},
      {"tool results",
       json::array({system, msg("user", "Weather in Paris?"),
                    msg("assistant", "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"),
                    msg("tool", "{\"temperature\": 21.5}"), msg("tool", "{\"rain\": false}"), msg("user", "Thanks!")}),
       true,
       {{"tools", weather_tools()}}},
      {"tools without a system message", json::array({msg("user", "What time is it in Tokyo?")}), true,
       {{"tools", weather_tools()}}},
      {"assistant tool calls",
       json::array({msg("user", "Weather in Paris and the time in Tokyo?"),
                    json{{"role", "assistant"},
                         {"content", nullptr},
                         {"tool_calls", json::parse(R"([
                            {"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
                            {"id": "call_2", "type": "function", "function": {"name": "local_time", "arguments": {}}}])")}},
                    json{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "{\"temperature\": 21.5}"}},
                    json{{"role", "tool"}, {"tool_call_id", "call_2"}, {"content", "09:00"}}}),
       true,
       {{"tools", weather_tools()}}},
      {"reasoning in an earlier answer",
       json::array({msg("user", "2 + 2?"), msg("assistant", "<think>\nTwo and two.\n</think>\n\n4"),
                    msg("user", "And times 3?")})},
      {"reasoning in the last answer",
       json::array({msg("user", "2 + 2?"), msg("assistant", "<think>\nTwo and two.\n</think>\n\n4")}), false},
      {"thinking off", json::array({system, msg("user", "Where is the treasure?")}), true,
       {{"enable_thinking", false}}},
      {"thinking on", json::array({msg("user", "Where is the treasure?")}), true, {{"enable_thinking", true}}},
      {"empty conversation", json::array()},
      {"empty content", json::array({msg("user", "")})},
  };
}

// The special tokens each family's tokenizer_config.json would give.
json special_tokens_for(const std::string& family) {
  static const std::map<std::string, std::pair<std::string, std::string>> tokens = {
      {"llama3", {"<|begin_of_text|>", "<|eot_id|>"}},
      {"gemma", {"<bos>", "<eos>"}},
      {"chatml_qwen", {"<|endoftext|>", "<|im_end|>"}},
      {"qwen3_thinking", {"<|endoftext|>", "<|im_end|>"}},
      {"phi3", {"<s>", "<|endoftext|>"}},
  };
  const auto it = tokens.find(family);
  const auto [bos, eos] = it != tokens.end() ? it->second : std::pair<std::string, std::string>{"<s>", "</s>"};
  return {{"bos_token", bos}, {"eos_token", eos}, {"unk_token", "<unk>"}, {"pad_token", "<pad>"}};
}

std::vector<fs::path> corpus() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(MESHNN_TEST_SOURCE_DIR) / "text" / "chat_templates"))
    if (entry.path().extension() == ".jinja") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ChatTemplateReference, CorpusRendersAsJinja2Does) {
  const std::vector<fs::path> files = corpus();
  ASSERT_GE(files.size(), 9u);
  std::vector<Case> cases;
  for (const fs::path& file : files) {
    const std::string source = slurp(file);
    for (const Conversation& conversation : conversations()) {
      Case c;
      c.name = file.stem().string() + ": " + conversation.name;
      c.source = source;
      c.messages = conversation.messages;
      c.add_generation_prompt = conversation.add_generation_prompt;
      c.special_tokens = special_tokens_for(file.stem().string());
      c.variables = conversation.variables;
      cases.push_back(std::move(c));
    }
  }
  const size_t agreed = expect_same_as_jinja2(cases);
  std::cout << "[ corpus ] " << agreed << " of " << cases.size() << " renders agree (" << files.size()
            << " templates)\n";
}

// The families that check roles do raise, and the others render, so the corpus tests both paths.
TEST(ChatTemplateReference, CorpusChecksRolesWhereTheFamilyDoes) {
  const Conversation bad = conversations()[9];
  ASSERT_EQ(bad.name, "roles do not alternate");
  for (const fs::path& file : corpus()) {
    Case c{file.stem().string(), slurp(file), bad.messages};
    c.special_tokens = special_tokens_for(c.name);
    const bool checks = c.name == "llama2" || c.name == "mistral" || c.name == "gemma";
    const Outcome o = render_meshnn(c);
    EXPECT_EQ(o.ok, !checks) << c.name << ": " << o.text;
    if (checks) {
      EXPECT_EQ(o.text.rfind("chat template: ", 0), 0u) << o.text;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Focused templates, one construct each, over a short conversation.

struct Focused {
  const char* name;
  const char* source;
  const char* variables = "{}";  // JSON object
};

const std::vector<Focused>& focused() {
  static const std::vector<Focused> cases = {
      // whitespace control
      {"trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter"},
      {"no trim after }}", "{{ 'a' }}\nb\n{{ 'c' }}\n"},
      {"lstrip_blocks", "  {% if true %}\n  x\n  {% endif %}\n\t{% for i in [1] %}{{ i }}{% endfor %}"},
      {"no lstrip before {{", "  {{ 'x' }}\n  {{- 'y' }}"},
      {"no lstrip after text on the line", "text {% if true %}\nx{% endif %}  {% if true %}y{% endif %}"},
      {"minus on the left", "a  \n  {%- if true %}b{% endif %}\n\n{{- 'c' }}"},
      {"minus on the right", "{% if true -%}  \n  b{% endif %}{{ 'c' -}}  \n\n  d"},
      {"minus on both sides", "x\n  {%- for i in range(3) -%}\n  {{ i }}  \n  {%- endfor -%}\n  y"},
      {"plus disables lstrip", "  {%+ if true %}x{% endif %}\n  {%+ if true +%}\ny{% endif %}"},
      {"plus disables trim", "{% if true +%}\nx{% endif +%}\n\n"},
      {"comment trimmed and lstripped", "a\n  {# c #}\nb {# inline #} c\n{# last #}"},
      {"comment whitespace control", "a \n {#- c -#} \n b{#+ d +#}\ne  {#+ f #}\ng"},
      {"comment spanning lines", "a{# one\ntwo {{ x }} {% if %}\n#}\nb"},
      {"trailing newline dropped once", "line\n\n"},
      {"carriage returns", "a\r\n{% if true %}\r\nb\rc{% endif %}\r\n"},
      {"raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|  {% raw -%}\n {{ x }} \n  {%- endraw %}\nz"},
      {"raw with lstrip and trim", "  {% raw %}\n  a\n  {% endraw %}\nb"},
      {"tag at line start after a block", "{% if true %}\n    {% if true %}\n    x\n    {% endif %}\n{% endif %}\n"},
      {"unicode space stripped by minus", "a\u3000{%- if true %}b{% endif %}"},
      {"empty output", "{% if false %}x{% endif %}"},
      {"newlines inside tags", "{{\n'a'\n~\n'b'\n}}{%\nif\ntrue\n%}c{%\nendif\n%}"},

      // scoping
      {"set in a loop does not leak", "{% set x = 1 %}{% for i in range(3) %}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}"},
      {"each iteration starts afresh", "{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 5 %}{{ x }};{% endfor %}{{ x }}"},
      {"loop-only variable is gone after", "{% for i in range(2) %}{% set y = i %}{% endfor %}[{{ y }}]"},
      {"if does not scope", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}"},
      {"macro has its own scope", "{% set z = 1 %}{% macro m() %}{% set z = 2 %}{{ z }}{% endmacro %}{{ m() }}{{ z }}"},
      {"macro reads globals when called", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}"},
      {"namespace carries out of loops", "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"},
      {"nested loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}"},
      {"outer loop kept in a variable", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3, 4] %}{{ outer.index }}{{ loop.index }} {% endfor %}{% endfor %}"},
      {"with", "{% set a = 5 %}{% with a = 1, b = a %}{% set c = 2 %}{{ a }}{{ b }}{{ c }}{% endwith %}{{ a }}[{{ b }}{{ c }}]"},
      {"loop variable is gone after", "{% for i in range(3) %}{% endfor %}[{{ i }}]"},
      {"for with a condition", "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}/{{ loop.length }}{{ '.' if loop.last }} {% endfor %}"},
      {"for else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] if false %}x{% else %}none passed{% endfor %}|{% for x in [1] %}{{ x }}{% else %}no{% endfor %}"},
      {"break and continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}"},
      {"break in a nested loop", "{% for i in range(3) %}{% for j in range(3) %}{% if j > i %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}"},
      {"generation block", "a{% generation %}{% set q = 1 %} in {{ messages[0].role }} {% endgeneration %}[{{ q }}]"},
      {"generation in a loop", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}"},
      {"block set", "{% set body %}  Hello {{ 'World' }}\n{% endset %}[{{ body }}]"},
      {"block set with filters", "{% set body | upper | trim %} a b {% endset %}[{{ body }}]"},
      {"tuple set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set c, d = 'xy' %}{{ d }}{{ c }}|{% set e = 1, %}{{ e }}"},
      {"tuple unpacking in for", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}"},
      {"unpacking the wrong count", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"},
      {"filter block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana bread{% endfilter %}"},

      // macros
      {"macro arguments", "{% macro m(a, b='B', c=none) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m(a=4) }} [{{ m() }}]"},
      {"macro default from an earlier argument", "{% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(3) }}{{ m(3, 1) }}"},
      {"macro recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"},
      {"macro result is a string", "{% macro m() %} x {% endmacro %}{{ m() | trim }}|{{ m() | length }}|{{ m() ~ m() }}"},
      {"macro whitespace", "{% macro m(x) -%}\n  [{{ x }}]\n{%- endmacro %}\n{{ m(1) }}\n{{ m(2) }}"},
      {"macro with too many arguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"},
      {"macro with an unknown keyword", "{% macro m(a) %}{% endmacro %}{{ m(b=2) }}"},
      {"runaway macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},

      // loop object
      {"loop attributes", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.depth }}{{ loop.depth0 }}|{% endfor %}"},
      {"loop edges are undefined", "{% for x in [1, 2] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }} {% endfor %}"},
      {"loop cycle", "{% for i in range(5) %}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}"},
      {"loop over a dict and a string", "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for ch in 'héé' %}[{{ ch }}]{% endfor %}"},
      {"loop over none", "{% for x in none %}{% endfor %}"},
      {"loop over an int", "{% for x in 3 %}{% endfor %}"},
      {"messages through index", "{% for m in messages %}{% if not loop.first %}{{ messages[loop.index0 - 1].role }}>{% endif %}{{ m.role }} {% endfor %}"},

      // undefined
      {"undefined basics", "[{{ missing }}]{{ missing is defined }}{{ missing is undefined }}{{ missing | default('d') }}{{ missing == none }}{{ missing == missing2 }}{{ missing != 1 }}"},
      {"undefined is empty", "{% for x in missing %}x{% endfor %}{% if missing %}t{% else %}f{% endif %}{{ missing | length }}{{ missing | list }}[{{ missing | join(',') }}]"},
      {"attribute of undefined", "{{ missing.attr }}"},
      {"item of undefined", "{{ missing['k'] }}"},
      {"undefined plus one", "{{ missing + 1 }}"},
      {"string plus undefined", "{{ 'a' + missing }}"},
      {"tilde with undefined", "[{{ missing ~ 'a' ~ missing }}]"},
      {"missing keys are undefined", "[{{ messages[0].nope }}]{{ messages[0]['nope'] is defined }}{{ messages[10] is defined }}{{ messages[-1].role }}"},
      {"attribute of a missing key", "{{ messages[0].nope.deeper }}"},
      {"attribute of none is undefined", "[{{ none.attr }}]{{ none.attr is defined }}{{ 5.attr is defined }}"},
      {"attribute of none's attribute", "{{ none.attr.more }}"},
      {"undefined through string filters", "[{{ missing | upper }}{{ missing | trim }}{{ missing | string }}{{ missing | capitalize }}]"},
      {"undefined to json", "{{ missing | tojson }}"},
      {"undefined to int", "{{ missing | int }}"},
      {"calling undefined", "{{ missing() }}"},
      {"comparing undefined", "{{ missing < 1 }}"},
      {"membership with undefined", "{{ 'a' in missing }}{{ missing in [1] }}{{ missing in [missing2] }}"},
      {"undefined inside a list", "{{ [missing] }}"},
      {"negated undefined", "{{ -missing }}"},
      {"undefined's tests", "{{ missing is callable }}{{ missing is iterable }}{{ missing is sequence }}{{ missing is mapping }}{{ missing is string }}{{ missing is number }}{{ missing is none }}"},
      {"if without else", "[{{ 'a' if false }}]{{ ('a' if false) is defined }}"},
      {"undefined through sequence filters", "{{ missing | first is defined }}{{ [] | first is defined }}{{ missing | items | list }}{{ missing | select | list }}{{ missing | map('upper') | list }}{{ missing | sum }}{{ missing | max is defined }}"},
      {"defined guard", "{{ x if x is defined else 'no x' }}|{{ messages[0].name | default(messages[0].role) }}"},
      {"undefined concatenated", "{{ missing ~ missing }}|{{ 'a' ~ missing.x if false else 'b' }}"},

      // printing values
      {"print scalars", "{{ none }}|{{ true }}|{{ false }}|{{ 1 }}|{{ -3 }}|{{ 1.0 }}|{{ 0.1 }}|{{ 1e-5 }}|{{ 1.5e300 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 123456789.123 }}|{{ 2 / 3 }}|{{ 0.1 + 0.2 }}|{{ -0.0 }}|{{ 1e400 }}|{{ -1e400 }}|{{ 1 / 3 }}|{{ 100.0 }}|{{ 1e22 }}|{{ 12345678901234567.0 }}|{{ 0.0001 }}|{{ 0.00012345 }}"},
      {"print a list", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}, (1, 2)] }}|{{ [] }}"},
      {"print a dict", "{{ {'a': 1, 2: 'b', none: [], 'c': (1,), 'd': (), 1.5: {}} }}|{{ {} }}"},
      {"print tuples", "{{ ('x', 1) }}|{{ (1,) }}|{{ () }}|{{ 1, 2 }}"},
      {"print string quoting", R"J({{ ["it's", 'say "hi"', 'both \' "', 'tab\there', 'nl\n', '\\', 'é', '\u00a0', '\x07', '\u200b', '\U0001F600', '\x7f', 'cr\r', "\u2028"] }})J"},
      {"print a namespace", "{{ namespace(a=1, b='x') }}"},
      {"print a namespace that holds itself", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}|{% set l = [ns, (ns,)] %}{% set ns.l = l %}{{ l }}|{{ ns }}"},
      {"print messages", "{{ messages[:2] }}"},
      {"print the render variables", "{{ tools }}|{{ documents }}|{{ tools is none }}|{{ add_generation_prompt }}|{{ bos_token }}{{ eos_token }}"},
      {"string escapes", R"J({{ 'a\tb\\n\'\"\x41\u00e9\101\q' }}|{{ "tab\there" }})J"},
      {"adjacent strings", "{{ 'a' 'b' \"c\" }}"},
      {"number literals", "{{ 1_000 + 0 }}|{{ 1.5e3 }}|{{ 2E-3 }}|{{ 0.5 }}|{{ 10.0 }}"},
      {"big integers", "{{ 2 ** 62 }}|{{ 9223372036854775807 }}|{{ -9223372036854775807 - 1 }}"},

      // operators and precedence
      {"arithmetic", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ 7 / 2 }}|{{ 6 / 3 }}|{{ 1 - 2 - 3 }}|{{ 2 ** -1 }}|{{ 2.0 ** 3 }}|{{ 5 % 2.5 }}|{{ true + 1 }}"},
      {"strings and lists", "{{ 'a' ~ 1 ~ none ~ [1] }}|{{ 'ab' * 3 }}|{{ 3 * 'ab' }}|{{ [1] * 2 }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ (1,) + (2,) }}|{{ 'x' * 0 }}|{{ 'x' * -1 }}"},
      {"str plus int", "{{ 'a' + 1 }}"},
      {"int plus str", "{{ 1 + 'a' }}"},
      {"list plus tuple", "{{ [1] + (2,) }}"},
      {"division by zero", "{{ 1 / 0 }}"},
      {"floor division by zero", "{{ 1 // 0 }}"},
      {"modulo by zero", "{{ 1 % 0 }}"},
      {"filter binds tighter than plus", "{{ 1 + 2 | string }}"},
      {"filter binds to the postfix", "{{ 'x' ~ 'abc' | upper }}|{{ 'a' ~ 1 + 2 }}|{{ -3 | abs }}|{{ 'ab' | upper ~ 'cd' }}|{{ messages | length * 2 }}"},
      {"boolean operators", "{{ not true and false }}|{{ not (true and false) }}|{{ true or false and false }}|{{ 1 and 2 }}|{{ 0 or '' }}|{{ none or 'dflt' }}|{{ 0 and missing.x }}|{{ 1 or missing.x }}"},
      {"not binds looser than is", "{{ not missing is defined }}|{{ not 1 is none }}|{{ not 1 == 2 }}"},
      {"comparisons", "{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ (1, 2) == [1, 2] }}|{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }}|{{ 'b' >= 'a' }}|{{ 2 != 2.0 }}|{{ 1 <= 1 }}|{{ 'é' > 'z' }}|{{ none == none }}|{{ 0 == false }}|{{ '1' == 1 }}"},
      {"ordering int and str", "{{ 1 < 'a' }}"},
      {"membership", "{{ 'ell' in 'hello' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 3 not in [1, 2] }}|{{ '' in 'x' }}|{{ 1.0 in [1] }}|{{ 'x' not in 'xyz' }}"},
      {"int in str", "{{ 1 in 'abc' }}"},
      {"conditional expressions", "{{ 'yes' if 1 > 0 else 'no' }}|{{ 'x' if false else 'y' if true else 'z' }}|{{ ('a' if true else 'b') | upper }}|{{ 'a' if true else 'b' | upper }}"},
      {"subscripts", "{{ (1, 2)[0] }}{{ [1, 2, 3][-1] }}{{ 'hello'[1] }}{{ 'hello'[-1] }}{{ {'a': {'b': 'c'}}.a.b }}{{ [[1, 2]][0][1] }}{{ messages.0.role }}{{ 'héllo'[1] }}|{{ [1][5] is defined }}|{{ 'ab'[9] is defined }}|{{ {'a': 1}['b'] is defined }}"},
      {"unary", "{{ -(3) }}|{{ +3 }}|{{ -1.5 }}|{{ - -2 }}|{{ -true }}|{{ +false }}"},
      {"unary minus on a string", "{{ -'a' }}"},
      {"call results chain", "{{ 'a,b'.split(',')[1].upper() }}|{{ messages[0].content.split()[0] }}"},

      // slices
      {"list slices", "{{ [1,2,3,4,5][1:3] }}|{{ [1,2,3,4,5][::-1] }}|{{ [1,2,3,4,5][::2] }}|{{ [1,2,3,4,5][-2:] }}|{{ [1,2,3,4,5][:-2] }}|{{ [1,2,3,4,5][4:1:-1] }}|{{ [1,2,3,4,5][-1:-4:-2] }}|{{ [1,2,3,4,5][10:] }}|{{ [1,2,3,4,5][:100] }}|{{ [1,2,3][::-1][0] }}|{{ (1,2,3)[1:] }}|{{ [1,2,3][-100:-50] }}|{{ [1,2,3][2:0] }}|{{ [1,2,3][:] }}"},
      {"string slices", "{{ 'héllo wörld'[1:4] }}|{{ 'héllo'[::-1] }}|{{ 'abcdef'[::-2] }}|[{{ 'abc'[5:] }}]|{{ 'abc'[-10:2] }}|{{ 'abcdef'[1::2] }}|{{ 'abcdef'[-2::-3] }}"},
      {"slice step zero", "{{ [1, 2][::0] }}"},
      {"slices of non-sequences", "[{{ none[1:] }}]{{ none[1:] is defined }}{{ {'a': 1}[1:] is defined }}"},
      {"slice of undefined", "{{ missing[1:] }}"},
      {"messages slices", "{% for m in messages[1:] %}{{ m.role }} {% endfor %}|{% for m in messages[-2:] %}{{ m.role }} {% endfor %}|{{ messages[1:3] | length }}"},

      // string methods
      {"strip", "[{{ '  a b  '.strip() }}]{{ 'xxaxx'.strip('x') }}[{{ '  a '.lstrip() }}][{{ ' a  '.rstrip() }}][{{ '\\u3000 a\\n\\xa0'.strip() }}]{{ 'abcba'.strip('ab') }}{{ 'ab'.lstrip('a') }}{{ 'ab'.rstrip('b') }}"},
      {"startswith and endswith", "{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith(('x', 'lo')) }}|{{ 'hello'.startswith(('x',)) }}|{{ ''.startswith('') }}|{{ 'héllo'.endswith('llo') }}"},
      {"split", "{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a  b'.split(' ') }}|{{ ''.split() }}|{{ ''.split(',') }}|{{ ' a b '.split(none, 1) }}|{{ 'a=b=c'.split('=', maxsplit=1) }}|{{ 'a b'.split(maxsplit=0) }}|{{ 'a::b'.split('::') }}"},
      {"splitlines", "{{ 'a\nb\r\nc\n'.splitlines() }}|{{ 'a\nb'.splitlines(true) }}|{{ ''.splitlines() }}|{{ '\n'.splitlines() }}|{{ 'a\r\n'.splitlines(keepends=true) }}"},
      {"case methods", "{{ 'Hello World'.upper() }}|{{ 'Hello World'.lower() }}|{{ 'hello wORLD'.title() }}|{{ \"they're bill's\".title() }}|{{ 'hELLO world'.capitalize() }}|{{ 'éa'.upper() }}|{{ 'ÀÉ'.lower() }}|{{ 'a1b2 c'.title() }}"},
      {"replace find count join", "{{ 'aaa'.replace('a', 'b') }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.replace('', '-') }}|{{ 'héllo'.find('l') }}|{{ 'hello'.find('z') }}|{{ 'hello'.rfind('l') }}|{{ 'hello'.count('l') }}|{{ 'abc'.count('') }}|{{ ', '.join(['a', 'b']) }}|{{ '-'.join('xyz') }}|{{ ''.join([]) }}"},
      {"join of ints", "{{ '-'.join([1, 2]) }}"},
      {"unknown str method", "{{ 'abc'.nosuch() }}"},
      {"str method existence", "{{ 'abc'.nosuch is defined }}|{{ 'abc'.upper is defined }}"},
      {"methods on message content", "{{ messages[1].content.strip().lower().startswith('hello') }}|{{ messages[1]['content'].upper() }}"},

      // dict and list methods
      {"dict methods", "{% set d = {'b': 1, 'a': 2} %}{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 'dflt') }}|{{ d['b'] }}|{{ d.b }}|{{ d.copy() }}"},
      {"methods before keys with a dot", "{% set d = {'items': 'key', 'x': 1} %}{{ d['items'] }}|{{ d.items is callable }}|{{ d.items() | list | length }}"},
      {"list methods", "{{ [1, 2, 2].count(2) }}|{{ ['a', 'b'].index('b') }}|{{ [1, 2].copy() }}"},
      {"list index of a missing item", "{{ [1].index(5) }}"},
      {"sandbox: list append", "{% set xs = [1] %}{{ xs.append(2) }}{{ xs }}"},
      {"sandbox: dict update", "{% set d = {} %}{{ d.update({'a': 1}) }}"},
      {"sandbox: dict pop", "{{ {'a': 1}.pop('a') }}"},
      {"sandbox: list sort", "{{ [3, 1].sort() }}"},
      {"sandbox: unsafe attributes are undefined", "{% set xs = [1] %}{{ xs.append is defined }}[{{ xs.append }}]{{ xs }}"},

      // filters
      {"abs", "{{ -3 | abs }}|{{ (-3) | abs }}|{{ -2.5 | abs }}|{{ 4 | abs }}"},
      {"abs of a string", "{{ 'a' | abs }}"},
      {"attr", "{{ messages[0] | attr('role') }}|{{ messages[0] | attr('items') is defined }}|{{ namespace(a=5) | attr('a') }}|{{ 'ab' | attr('upper') is callable }}"},
      {"capitalize and title", "{{ 'hELLO wORLD' | capitalize }}|{{ 'hello wORLD-foo (bar) [baz] <q>x {y}' | title }}|{{ \"they're\" | title }}|{{ 'é-à' | title }}"},
      {"center", "[{{ 'ab' | center(7) }}]|[{{ 'abc' | center(6) }}]|[{{ 'abcdef' | center(3) }}]|[{{ 'x' | center }}]|[{{ 'ab' | center(5) }}]"},
      {"length and count", "{{ 'héllo' | length }}|{{ [1, 2] | count }}|{{ {'a': 1} | length }}|{{ messages | length }}|{{ (1, 2, 3) | length }}"},
      {"length of an int", "{{ 5 | length }}"},
      {"default", "{{ none | default('x') }}|{{ none | default('x', true) }}|{{ '' | default('x', boolean=true) }}|{{ 0 | d('zero', true) }}|{{ false | default('f') }}|[{{ missing | default }}]|{{ missing | d(none) }}|{{ [] | default([1], true) }}"},
      {"dictsort", "{% set d = {'b': 2, 'A': 3, 'c': 1} %}{{ d | dictsort }}|{{ d | dictsort(true) }}|{{ d | dictsort(by='value') }}|{{ d | dictsort(reverse=true) }}|{{ {} | dictsort }}"},
      {"dictsort by something else", "{{ {'a': 1} | dictsort(by='x') }}"},
      {"first and last", "{{ [1, 2, 3] | first }}|{{ [1, 2, 3] | last }}|{{ 'abc' | first }}|{{ 'abc' | last }}|{{ {'k': 1} | first }}|[{{ [] | first }}]|{{ [] | last is defined }}"},
      {"float", "{{ '1.5' | float }}|{{ 'x' | float }}|{{ 'x' | float(2.5) }}|{{ 3 | float }}|{{ ' 2e3 ' | float }}|{{ none | float }}|{{ 'inf' | float }}|{{ true | float }}|{{ '-1_0.5' | float }}|{{ '1.5x' | float }}|{{ 'nan' | float }}|{{ '' | float }}"},
      {"int", "{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(-1) }}|{{ 3.9 | int }}|{{ -3.9 | int }}|{{ ' 12 ' | int }}|{{ 'ff' | int(base=16) }}|{{ none | int }}|{{ true | int }}|{{ '1_000' | int }}|{{ '-7' | int }}|{{ '+7' | int }}|{{ '1e3' | int }}|{{ [] | int }}"},
      {"items", "{{ {'a': 1, 'b': 2} | items | list }}|{% for k, v in messages[0] | items %}{{ k }};{% endfor %}"},
      {"items of a list", "{{ [1] | items | list }}"},
      {"join", "{{ [1, 'a', none] | join }}|{{ [1, 2] | join(', ') }}|{{ messages | join(' ', attribute='role') }}|{{ 'abc' | join('-') }}|{{ [] | join(',') }}|{{ [[1], (2,)] | join(';') }}|{{ [{'a': {'b': 'x'}}] | join(attribute='a.b') }}"},
      {"list", "{{ 'ab' | list }}|{{ {'a': 1} | list }}|{{ (1, 2) | list }}|{{ [] | list }}"},
      {"list of an int", "{{ 3 | list }}"},
      {"lower and upper", "{{ 'HeLLo' | lower }}|{{ 'HeLLo' | upper }}|{{ 'éà' | upper }}|{{ 1 | upper }}|{{ none | lower }}"},
      {"map", "{{ messages | map(attribute='role') | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ [' a ', 'b '] | map('trim') | join('|') }}|{{ ['ab'] | map('replace', 'a', 'x') | list }}|{{ [{'x': 1}, {}] | map(attribute='x', default=0) | list }}|{{ [[1, 2], [3]] | map('length') | list }}|{{ messages | map(attribute='nope') | list }}|{{ [[1, 2]] | map(attribute='0') | list }}"},
      {"map with an unknown filter", "{{ ['a'] | map('nosuch') | list }}"},
      {"max and min", "{{ [3, 1, 2] | max }}|{{ [3, 1, 2] | min }}|{{ ['b', 'A', 'c'] | max }}|{{ ['b', 'A', 'c'] | min }}|{{ ['b', 'A', 'c'] | max(case_sensitive=true) }}|{{ messages | max(attribute='content') }}|{{ [] | max is defined }}|{{ [1, 1.0] | max }}|{{ 'hello' | max }}"},
      {"select and reject", "{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ [0, 1, '', 'a', none] | select | list }}|{{ [1, 5, 10] | select('gt', 4) | list }}|{{ [1, 5, 10] | select('>', 4) | list }}|{{ [1, 5, 10] | reject('divisibleby', 5) | list }}|{{ ['a', 1] | select('string') | list }}|{{ [1, 2] | select('in', [2, 3]) | list }}|{{ [1, 2] | select('equalto', 2) | list }}|{{ [0, 1] | reject | list }}"},
      {"select with an unknown test", "{{ [1] | select('nosuch') | list }}"},
      {"selectattr and rejectattr", "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}|{{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }}|{{ [{'a': 1}, {'a': 0}, {}] | selectattr('a') | list }}|{{ [{'a': 1}, {}] | selectattr('a', 'defined') | list }}|{{ [{'a': 1}, {}] | rejectattr('a', 'undefined') | list }}|{{ [{'a': 1}, {'a': 0}] | rejectattr('a') | list }}|{{ messages | selectattr('role', '==', 'assistant') | list | length }}"},
      {"replace", "{{ 'aXbXc' | replace('X', '-') }}|{{ 'aXbXc' | replace('X', '-', 1) }}|{{ 123 | replace('2', 'two') }}|{{ 'abc' | replace('', '.') }}|{{ 'a\nb' | replace('\n', '\\n') }}"},
      {"reverse", "{{ 'abc' | reverse }}|{{ [1, 2, 3] | reverse | list }}|{{ 'héllo' | reverse }}|{{ {'a': 1, 'b': 2} | reverse | list }}"},
      {"round", "{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.675 | round(2) }}|{{ 1.25 | round(1) }}|{{ 3 | round }}|{{ 3.14159 | round(3) }}|{{ 2.1 | round(method='ceil') }}|{{ 2.9 | round(0, 'floor') }}|{{ -0.5 | round }}|{{ 1234.5 | round(-2) }}|{{ 7 | round(1, 'ceil') }}|{{ 0.125 | round(2) }}|{{ -2.5 | round }}|{{ 1e20 | round(2) }}"},
      {"round of a string", "{{ 'a' | round }}"},
      {"round with an unknown method", "{{ 1.5 | round(0, 'up') }}"},
      {"sort", "{{ [3, 1, 2] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['b', 'A', 'c'] | sort }}|{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}|{{ messages | sort(attribute='role') | map(attribute='content') | list }}|{{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}, {'a': 1, 'b': 1}] | sort(attribute='a,b') }}|{{ 'cab' | sort }}|{{ [[2, 1], [1, 2]] | sort }}"},
      {"sort of mixed types", "{{ [1, 'a'] | sort }}"},
      {"string", "{{ 1 | string ~ 2 }}|{{ none | string }}|{{ [1] | string }}|{{ 1.0 | string }}|{{ (1 | string) is string }}"},
      {"sum", "{{ [1, 2, 3] | sum }}|{{ [1.5, 2] | sum }}|{{ [[1], [2]] | sum(start=[]) }}|{{ [{'n': 1}, {'n': 2}] | sum(attribute='n') }}|{{ [] | sum }}|{{ [true, true] | sum }}"},
      {"sum of strings", "{{ ['a', 'b'] | sum }}"},
      {"tojson", R"J({{ {'a': [1, 2.5, none, true], 'b': 'x"y\\z\n\t', 'c': 'é✓🙂'} | tojson }}|{{ [] | tojson(indent=2) }}|{{ {'a': {}, 'b': [1, {'c': []}]} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ [1, 2] | tojson(separators=(',', ':')) }}|{{ 'é🙂' | tojson(ensure_ascii=true) }}|{{ {1: 'a', 2.5: 'b', none: 'n', false: 'f'} | tojson }}|{{ (1, 'x') | tojson }}|{{ '\x01\x7f\u2028' | tojson }}|{{ {'a': 1} | tojson(indent='\t') }}|{{ 1e-7 | tojson }}|{{ 1e400 | tojson }}|{{ 'a<b>&' | tojson }}|{{ [1, [2]] | tojson(indent=0) }})J"},
      {"tojson of messages", "{{ messages | tojson }}|{{ messages[0] | tojson(indent=4) }}"},
      {"tojson of a namespace", "{{ namespace() | tojson }}"},
      {"tojson of a tuple key", "{{ {(1, 2): 'x'} | tojson }}"},
      {"trim", "[{{ '  a  ' | trim }}]|[{{ 'xxaxx' | trim('x') }}]|[{{ '\n\ta b\n' | trim }}]|[{{ 5 | trim }}]|[{{ ' é ' | trim }}]"},
      {"unique", "{{ [1, 2, 1, 3, 2] | unique | list }}|{{ ['a', 'A', 'b'] | unique | list }}|{{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }}|{{ messages | unique(attribute='role') | map(attribute='role') | list }}|{{ [1, 1.0, true] | unique | list }}"},
      {"wordcount", "{{ 'Hello, world! héllo_x 42' | wordcount }}|{{ '' | wordcount }}|{{ 'one' | wordcount }}|{{ '  a  b  ' | wordcount }}"},
      {"indent", "[{{ 'a\nb\n\nc' | indent }}]|[{{ 'a\nb' | indent(2, true) }}]|[{{ 'a\n\nb' | indent(2, blank=true) }}]|[{{ 'a\nb' | indent('> ') }}]|[{{ 'a\nb\n' | indent(first=true) }}]|[{{ '' | indent }}]"},
      {"unknown filter", "{{ 'x' | nosuchfilter }}"},
      {"unknown filter and test in a branch never taken", "{% if false %}{{ x | nosuch }}{{ 1 is nosuch }}{% endif %}ok"},

      // tests
      {"type tests", "{{ none is none }}{{ 1 is none }}{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 'a' is string }}{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 'a' is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is mapping }}{{ messages[0] is mapping }}"},
      {"container tests", "{{ [] is iterable }}{{ 'a' is iterable }}{{ 1 is iterable }}{{ {} is iterable }}{{ [] is sequence }}{{ 'a' is sequence }}{{ 1 is sequence }}{{ {} is sequence }}{{ range is callable }}{{ 'a'.upper is callable }}{{ 'a' is callable }}{{ namespace is callable }}{{ none is iterable }}"},
      {"number tests", "{{ 2 is even }}{{ 3 is even }}{{ 3 is odd }}{{ -3 is odd }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ 4.0 is even }}{{ 0 is even }}"},
      {"comparison tests", "{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 1 is le 1 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 2 is greaterthan 1 }}{{ 2 is lessthan 1 }}{{ 2 is in [1, 2] }}{{ 'a' is in 'cat' }}{{ 'a' is eq('a') }}"},
      {"case tests", "{{ 'abc' is lower }}{{ 'aBc' is lower }}{{ 'ABC' is upper }}{{ '12' is upper }}{{ 'É' is upper }}{{ 'a1' is lower }}"},
      {"sameas", "{{ none is sameas none }}{{ true is sameas true }}{{ messages[0] is sameas messages[0] }}{{ messages[0] is sameas messages[1] }}{{ 1 is sameas 1 }}{{ false is sameas 0 }}"},
      {"negated tests", "{{ 1 is not none }}{{ not 1 is none }}{{ x is not defined }}{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}{{ 'abc' is not string }}"},
      {"even of a string", "{{ 'a' is even }}"},
      {"test with an operator name", "{{ 1 is == 1 }}"},
      {"unknown test", "{{ 1 is nosuchtest }}"},

      // globals
      {"range", "{{ range(3) | list }}|{{ range(1, 4) | list }}|{{ range(10, 0, -3) | list }}|{{ range(0) | list }}|{{ range(5, 1) | list }}|{% for i in range(2, 8, 2) %}{{ i }}{% endfor %}|{{ range(3) | length }}"},
      {"range too big", "{{ range(200000) | length }}"},
      {"range step zero", "{{ range(1, 2, 0) | list }}"},
      {"dict", "{{ dict(a=1, b='x') }}|{{ dict() }}|{{ dict({'z': 0}, y=1) }}|{{ dict([('k', 'v')]) }}"},
      {"namespace", "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}{{ ns['a'] }}|{% set ns2 = namespace({'k': 'v'}, j=1) %}{{ ns2.k }}{{ ns2.j }}"},
      {"set attribute on a non-namespace", "{% set x = 1 %}{% set x.attr = 2 %}"},
      {"raise_exception", "before{{ raise_exception('custom message') }}"},
      {"raise_exception in an untaken branch", "{% if false %}{{ raise_exception('no') }}{% endif %}fine"},
      {"strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %p %y %e %a %b %d %m %I %M %%') }}|{{ strftime_now('%d %b %Y') }}|[{{ strftime_now('') }}]|{{ strftime_now('%f') }}"},

      // render variables given as JSON
      {"tools variable", "{% for t in tools %}{{ t.function.name }}: {{ t.function.parameters | tojson }}\n{% endfor %}{{ tools | length }}",
       R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}, {"type": "function", "function": {"name": "g", "parameters": {}}}]})"},
      {"nested variable", "{{ extra.nested[1].x }}|{{ extra }}|{{ extra.u is none }}|{{ extra | tojson }}",
       R"({"extra": {"nested": [0, {"x": 1.5}], "u": null, "b": true, "s": "é", "big": 12345678901, "f": 2.0}})"},
      {"messages with content parts", "{% for m in messages %}{{ m.role }}: {% if m.content is string %}{{ m.content }}{% else %}{% for part in m.content %}{{ part.text if part.type == 'text' else '<' ~ part.type ~ '>' }}{% endfor %}{% endif %}\n{% endfor %}",
       R"({"messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}, {"role": "assistant", "content": "A cat."}]})"},
      {"a flag variable", "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}answer", R"({"enable_thinking": false})"},

      // syntax errors
      {"if without a condition", "{% if %}{% endif %}"},
      {"for without an iterable", "{% for x in %}{% endfor %}"},
      {"dangling operator", "{{ 1 + }}"},
      {"endif without if", "{% endif %}"},
      {"if without endif", "{% if true %}no end"},
      {"unterminated string", "{{ 'unterminated }}"},
      {"unterminated comment", "{# no end"},
      {"unclosed parenthesis", "{{ (1 }}"},
      {"unclosed variable tag", "{{ 1 "},
      {"unknown tag", "{% foo %}"},
      {"include", "{% include 'x' %}"},
      {"extends", "{% extends 'x' %}"},
      {"break outside a loop", "{% break %}"},
      {"empty filter", "{{ x | }}"},
      {"assign to a literal", "{% set 1 = 2 %}"},
      {"macro argument order", "{% macro m(a=1, b) %}{% endmacro %}"},
      {"trailing dot", "{{ a.b. }}"},
      {"unclosed list", "{{ [1, 2 }}"},
      {"empty expression", "{{ }}"},
      {"else twice", "{% if true %}{% else %}{% else %}{% endif %}"},
      {"stray endfor", "{% for x in [] %}{% endif %}"},
      {"unexpected character", "{{ 1 ? 2 }}"},
      {"mismatched bracket", "{{ (1] }}"},
  };
  return cases;
}

std::vector<Case> focused_cases() {
  const json messages = json::array({msg("system", "You are terse."), msg("user", "Hello there!"),
                                     msg("assistant", "Hi."), msg("user", "Bye?")});
  std::vector<Case> cases;
  for (const Focused& f : focused()) {
    Case c{f.name, f.source, messages};
    c.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    c.variables = json::parse(f.variables);
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(ChatTemplateReference, FocusedTemplatesRenderAsJinja2Does) {
  const std::vector<Case> cases = focused_cases();
  const size_t agreed = expect_same_as_jinja2(cases);
  std::cout << "[ focused ] " << agreed << " of " << cases.size() << " templates agree\n";
}

// ---------------------------------------------------------------------------------------------
// meshnn's own messages and limits.

std::string error_of(const std::string& source, const ChatTemplateInputs& inputs = {}) {
  try {
    ChatTemplate(source).render(inputs);
  } catch (const meshnn::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Each template with the message meshnn gives for it.
void expect_errors(const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [source, message] : cases) EXPECT_EQ(error_of(source), message) << json(source).dump();
}

TEST(ChatTemplate, SyntaxErrorsAndUnsupportedConstructsNameTheLine) {
  expect_errors({
      {"\n{% include 'header.jinja' %}", "chat template line 2: the 'include' tag is not supported"},
      {"{% call m() %}{% endcall %}", "chat template line 1: the 'call' tag is not supported"},
      {"\n\n\n{% for x in xs recursive %}{% endfor %}", "chat template line 4: recursive for loops are not supported"},
      {"{{ f(*args) }}", "chat template line 1: *args and **kwargs in calls are not supported"},
      {"{% frobnicate %}", "chat template line 1: unknown tag 'frobnicate'"},
      {"{% if x %}\n\n", "chat template line 2: unexpected end of template, expected 'elif' or 'else' or 'endif'"},
      {"x\n{{ 'abc", "chat template line 2: unterminated string"},
  });
}

TEST(ChatTemplate, RunTimeErrorsNameTheLine) {
  expect_errors({
      // An unknown filter or test fails when it runs, as in Jinja2 since 3.0, not where it is
      // written: a branch never taken may name one.
      {"a\nb\n{{ x | xmlattr }}", "chat template line 3: unknown filter 'xmlattr'"},
      {"{{ x | batch(2) }}", "chat template line 1: unknown filter 'batch'"},
      {"{% if false %}{{ 'x' | nosuch }}{% endif %}{{ 1 is nosuch }}", "chat template line 1: unknown test 'nosuch'"},
      {"{% if true %}{{ 'x' | nosuch }}{% endif %}", "chat template line 1: unknown filter 'nosuch'"},
      {"line 1\n{% set x = none %}\n\n{{ missing.attr }}", "chat template line 4: 'missing' is undefined"},
      {"{% for m in ['hi'] %}\n{{ m + 1 }}{% endfor %}",
       "chat template line 2: unsupported operand type(s) for +: 'str' and 'int'"},
      {"\n{{ [1].append(2) }}", "chat template line 2: access to attribute 'append' of 'list' object is unsafe."},
      // Jinja2 before 3.1.5 let list.pop and list.clear through its immutable sandbox; meshnn, as
      // the releases since, does not.
      {"{{ [1].pop() }}", "chat template line 1: access to attribute 'pop' of 'list' object is unsafe."},
      {"{{ '%s' % 1 }}", "chat template line 1: printf-style formatting of strings (str % values) is not supported"},
      {"{{ 'a'.zfill(3) }}", "chat template line 1: meshnn does not implement str.zfill()"},
  });
}

TEST(ChatTemplate, RaiseExceptionGivesTheTemplatesMessage) {
  EXPECT_EQ(error_of("x\n{{ raise_exception('Conversation roles must alternate') }}"),
            "chat template: Conversation roles must alternate");
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  EXPECT_EQ(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "chat template line 1: macro calls nested more than 100 deep");
  const std::string big = error_of("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}");
  EXPECT_NE(big.find("more than 64 MiB"), std::string::npos) << big;
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}").find("more than 64 MiB"), std::string::npos);
  EXPECT_EQ(error_of("{% for i in range(1000) %}{% for j in range(1001) %}{% endfor %}{% endfor %}"),
            "chat template line 1: more than 1000000 loop iterations");
  // 150 nested `not`s around each of the nested macro calls: an error, not a stack overflow.
  std::string nots;
  for (int i = 0; i < 150; ++i) nots += "not ";
  const std::string deep_calls = error_of("{% macro f(n) %}{{ " + nots + "f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(deep_calls.find("statements and expressions nested more than 500 deep"), std::string::npos) << deep_calls;
  const std::string deep = error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}");
  EXPECT_NE(deep.find("nested too deeply"), std::string::npos) << deep;
}

TEST(ChatTemplate, CopiesRenderTheSameAndInputsAreTheirVariables) {
  const ChatTemplate original("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                              "{{ '!' if add_generation_prompt }}{{ n }}");
  ChatTemplateInputs in;
  in.messages = {{"user", "héllo \xff"}};  // not UTF-8: read as Python would decode it, with U+FFFD
  in.special_tokens = {{"bos_token", "<s>"}};
  in.json_variables = {{"n", "[1, 2.5, null]"}};
  const ChatTemplate copy = original;
  EXPECT_EQ(copy.render(in), "<s><user>héllo \xEF\xBF\xBD![1, 2.5, None]");
  in.add_generation_prompt = false;
  const ChatTemplate moved = std::move(copy);
  EXPECT_EQ(moved.render(in), "<s><user>héllo \xEF\xBF\xBD[1, 2.5, None]");
  in.json_variables = {{"n", "{not json"}};
  EXPECT_THROW(moved.render(in), meshnn::Error);
}

// --chat-template-kwargs and a request's chat_template_kwargs: a JSON object's members, in order,
// as variables; a request's replace the defaults by name.
TEST(ChatTemplate, KeywordArgumentsBecomeVariables) {
  const auto vars = template_variables_from_json(R"({"enable_thinking": false, "a": [1, "x"], "b": null})", "kwargs");
  ASSERT_EQ(vars.size(), 3u);
  EXPECT_EQ(vars[0], (std::pair<std::string, std::string>{"enable_thinking", "false"}));
  EXPECT_EQ(vars[1], (std::pair<std::string, std::string>{"a", R"([1,"x"])"}));
  EXPECT_EQ(vars[2], (std::pair<std::string, std::string>{"b", "null"}));
  const ChatTemplate t("{{ 'off' if enable_thinking is false else 'on' }} {{ a[1] }} {{ b }}");
  ChatTemplateInputs in;
  in.json_variables = vars;
  EXPECT_EQ(t.render(in), "off x None");
  in.json_variables = with_variables(vars, {{"enable_thinking", "true"}, {"c", "1"}});
  EXPECT_EQ(in.json_variables.size(), 4u);
  EXPECT_EQ(in.json_variables[0].second, "true");  // replaced in its place
  EXPECT_EQ(t.render(in), "on x None");
  for (const char* bad : {"[1]", "false", "{", "", R"({"messages": []})"}) {
    try {
      template_variables_from_json(bad, "--chat-template-kwargs");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const meshnn::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--chat-template-kwargs"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
