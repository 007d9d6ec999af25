#include "tokenizer/builtin_templates.h"

#include <algorithm>
#include <array>

namespace inferd::tokenizer {
namespace {

// Each template is written on one logical line (adjacent literals, no newline in the source), so
// that the trim_blocks / lstrip_blocks rules never touch the output: every newline a prompt holds
// is an explicit '\n' in an expression. `m.content | trim` strips surrounding white space where
// the format does. Several formats share a body and differ in a few settings, set first.
struct Builtin {
  std::string_view name;
  std::string_view settings;  // `{% set ... %}` statements the body reads
  std::string_view body;
};

constexpr std::string_view kChatml =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// [INST] turns; a system message opens the first turn. lead/trail: spaces around [INST];
// trim_reply: the assistant's text is stripped.
constexpr std::string_view kMistralTurns =
    "{% set ns = namespace(open=false) %}{% for m in messages %}"
    "{% if not ns.open %}{{ lead + '[INST]' + trail }}{% set ns.open = true %}{% endif %}"
    "{% if m.role == 'system' %}{{ m.content + '\\n\\n' }}"
    "{% elif m.role == 'user' %}{{ m.content + lead + '[/INST]' }}"
    "{% else %}{{ trail + ((m.content | trim) if trim_reply else m.content) + '</s>' }}"
    "{% set ns.open = false %}{% endif %}{% endfor %}";

// [SYSTEM_PROMPT] / [INST] blocks; sp is the space after each opening tag (none in "tekken").
constexpr std::string_view kMistralV7 =
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{{ '[SYSTEM_PROMPT]' + sp + m.content + '[/SYSTEM_PROMPT]' }}"
    "{% elif m.role == 'user' %}{{ '[INST]' + sp + m.content + '[/INST]' }}"
    "{% else %}{{ sp + m.content + '</s>' }}{% endif %}{% endfor %}";

// Llama 2: the first [INST] is written before the loop (BOS comes from the tokenizer).
// with_system: <<SYS>> blocks (else the system text opens the turn); bos_inside: later turns
// start with <s>; strip: every message is stripped.
constexpr std::string_view kLlama2 =
    "{% set ns = namespace(open=true) %}{{ '[INST] ' }}{% for m in messages %}"
    "{% set text = (m.content | trim) if strip else m.content %}"
    "{% if not ns.open %}{% set ns.open = true %}"
    "{{ '<s>[INST] ' if bos_inside else '[INST] ' }}{% endif %}"
    "{% if m.role == 'system' %}"
    "{% if with_system %}{{ '<<SYS>>\\n' + text + '\\n<</SYS>>\\n\\n' }}"
    "{% else %}{{ text + '\\n' }}{% endif %}"
    "{% elif m.role == 'user' %}{{ text + ' [/INST]' }}"
    "{% else %}{{ text + '</s>' }}{% set ns.open = false %}{% endif %}{% endfor %}";

// Gemma: "assistant" is "model"; system text has no turn of its own and opens the next user turn.
constexpr std::string_view kGemma =
    "{% set ns = namespace(system='') %}{% for m in messages %}"
    "{% if m.role == 'system' %}{% set ns.system = ns.system + (m.content | trim) %}"
    "{% else %}{% set role = 'model' if m.role == 'assistant' else m.role %}"
    "{{ '<start_of_turn>' + role + '\\n' }}"
    "{% if ns.system != '' and role != 'model' %}{{ ns.system + '\\n\\n' }}"
    "{% set ns.system = '' %}{% endif %}"
    "{{ (m.content | trim) + '<end_of_turn>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

// Gemma 4's turns (no name in llama.cpp's list; what its own template renders for
// conversations without tools): a system turn when there is a system message or thinking is on
// (<|think|> first), the model's earlier turns without their thoughts, and with thinking off an
// empty thought channel after the generation prompt.
constexpr std::string_view kGemma4 =
    "{{ bos_token }}{% set ns = namespace(rest=messages) %}"
    "{% set thinking = enable_thinking is defined and enable_thinking %}"
    "{% set has_system = messages | length > 0 and messages[0].role in ['system', 'developer'] %}"
    "{% if thinking or has_system %}{{ '<|turn>system\\n' }}"
    "{% if thinking %}{{ '<|think|>\\n' }}{% endif %}"
    "{% if has_system %}{{ messages[0].content | trim }}{% set ns.rest = messages[1:] %}{% endif %}"
    "{{ '<turn|>\\n' }}{% endif %}"
    "{% for m in ns.rest %}{% set role = 'model' if m.role == 'assistant' else m.role %}"
    "{{ '<|turn>' + role + '\\n' }}{% if role == 'model' %}{% set t = namespace(text='') %}"
    "{% for part in m.content.split('<channel|>') %}"
    "{% set t.text = t.text + (part.split('<|channel>')[0] if '<|channel>' in part else part) %}"
    "{% endfor %}{{ t.text | trim }}{% else %}{{ m.content | trim }}{% endif %}"
    "{{ '<turn|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|turn>model\\n' }}"
    "{% if not thinking %}{{ '<|channel>thought\\n<channel|>' }}{% endif %}{% endif %}";

constexpr std::string_view kLlama3 =
    "{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + "
    "(m.content | trim) + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

constexpr std::string_view kLlama4 =
    "{% for m in messages %}{{ '<|header_start|>' + m.role + '<|header_end|>\\n\\n' + "
    "(m.content | trim) + '<|eot|>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|header_start|>assistant<|header_end|>\\n\\n' }}{% endif %}";

constexpr std::string_view kPhi3 =
    "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

constexpr std::string_view kPhi4 =
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '<|im_sep|>' + m.content + "
    "'<|im_end|>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}";

constexpr std::string_view kFalcon3 =
    "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

constexpr std::string_view kZephyr =
    "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|endoftext|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

constexpr std::string_view kMonarch =
    "{% for m in messages %}{{ ('' if loop.first else '<s>') + m.role + '\\n' + m.content + "
    "'</s>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<s>assistant\\n' }}{% endif %}";

constexpr std::string_view kOrion =
    "{% set ns = namespace(system='') %}{% for m in messages %}"
    "{% if m.role == 'system' %}{% set ns.system = ns.system + m.content %}"
    "{% elif m.role == 'user' %}{{ 'Human: ' }}{% if ns.system != '' %}"
    "{{ ns.system + '\\n\\n' }}{% set ns.system = '' %}{% endif %}"
    "{{ m.content + '\\n\\nAssistant: </s>' }}{% else %}{{ m.content + '</s>' }}{% endif %}"
    "{% endfor %}";

constexpr std::string_view kOpenchat =
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content + '<|end_of_turn|>' }}"
    "{% else %}{{ 'GPT4 Correct ' + (m.role[:1] | upper) + m.role[1:] + ': ' + m.content + "
    "'<|end_of_turn|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'GPT4 Correct Assistant:' }}{% endif %}";

// orca: the system message is marked "SYSTEM: ".
constexpr std::string_view kVicuna =
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{{ ('SYSTEM: ' + m.content + '\\n') if orca else (m.content + '\\n\\n') }}"
    "{% elif m.role == 'user' %}{{ 'USER: ' + m.content + '\\n' }}"
    "{% elif m.role == 'assistant' %}{{ 'ASSISTANT: ' + m.content + '</s>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}";

constexpr std::string_view kDeepseek =
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content }}"
    "{% elif m.role == 'user' %}{{ '### Instruction:\\n' + m.content + '\\n' }}"
    "{% elif m.role == 'assistant' %}{{ '### Response:\\n' + m.content + '\\n<|EOT|>\\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '### Response:\\n' }}{% endif %}";

constexpr std::string_view kDeepseek2 =
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content + '\\n\\n' }}"
    "{% elif m.role == 'user' %}{{ 'User: ' + m.content + '\\n\\n' }}"
    "{% elif m.role == 'assistant' %}{{ 'Assistant: ' + m.content + "
    "'<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

constexpr std::string_view kDeepseek3 =
    "{% for m in messages %}{% if m.role == 'system' %}{{ m.content + '\\n\\n' }}"
    "{% elif m.role == 'user' %}{{ '<\xef\xbd\x9cUser\xef\xbd\x9c>' + m.content }}"
    "{% elif m.role == 'assistant' %}{{ '<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c>' + m.content + "
    "'<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c>' }}{% endif %}";

constexpr std::string_view kCommandR =
    "{% set tags = {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>', "
    "'assistant': '<|CHATBOT_TOKEN|>'} %}{% for m in messages %}{% if m.role in tags %}"
    "{{ '<|START_OF_TURN_TOKEN|>' + tags[m.role] + (m.content | trim) + '<|END_OF_TURN_TOKEN|>' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}";

constexpr std::string_view kChatglm3 =
    "{{ '[gMASK]sop' }}{% for m in messages %}{{ '<|' + m.role + '|>\\n ' + m.content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";

constexpr std::string_view kChatglm4 =
    "{{ '[gMASK]<sop>' }}{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";

constexpr std::string_view kGlmEdge =
    "{% for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";

constexpr std::string_view kMinicpm =
    "{% for m in messages %}{% if m.role == 'user' %}"
    "{{ '<\xe7\x94\xa8\xe6\x88\xb7>' + (m.content | trim) + '<AI>' }}"
    "{% else %}{{ m.content | trim }}{% endif %}{% endfor %}";

// with_tool: tool messages get a turn of their own (EXAONE 4).
constexpr std::string_view kExaone =
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{{ '[|system|]' + (m.content | trim) + '[|endofturn|]\\n' }}"
    "{% elif m.role == 'user' %}{{ '[|user|]' + (m.content | trim) + '\\n' }}"
    "{% elif m.role == 'assistant' %}{{ '[|assistant|]' + (m.content | trim) + '[|endofturn|]\\n' "
    "}}"
    "{% elif m.role == 'tool' and with_tool %}{{ '[|tool|]' + (m.content | trim) + "
    "'[|endofturn|]\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '[|assistant|]' }}{% endif %}";

constexpr std::string_view kGranite =
    "{% for m in messages %}{% if m.role == 'assistant_tool_call' %}"
    "{{ '<|start_of_role|>' + (m.role if keep_tool_role else 'assistant') + "
    "'<|end_of_role|><|tool_call|>' }}{% else %}{{ '<|start_of_role|>' + m.role + "
    "'<|end_of_role|>' }}{% endif %}{{ m.content + '<|end_of_text|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_of_role|>assistant<|end_of_role|>' }}{% endif %}";

constexpr std::string_view kSmolvlm =
    "{{ '<|im_start|>' }}{% for m in messages %}{% if m.role == 'system' %}"
    "{{ m.content + '\\n\\n' }}{% elif m.role == 'user' %}"
    "{{ 'User: ' + m.content + '<end_of_utterance>\\n' }}"
    "{% else %}{{ 'Assistant: ' + m.content + '<end_of_utterance>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

constexpr std::string_view kGptOss =
    "{% for m in messages %}{{ '<|start|>' + m.role + '<|message|>' + m.content + "
    "('<|return|>' if m.role == 'assistant' else '<|end|>') }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start|>assistant' }}{% endif %}";

constexpr std::string_view kKimiK2 =
    "{% set heads = {'system': '<|im_system|>system', 'user': '<|im_user|>user', "
    "'assistant': '<|im_assistant|>assistant', 'tool': '<|im_system|>tool'} %}"
    "{% for m in messages %}{% if m.role in heads %}{{ heads[m.role] + '<|im_middle|>' }}"
    "{% endif %}{{ m.content + '<|im_end|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_assistant|>assistant<|im_middle|>' }}{% endif %}";

constexpr std::string_view kSeedOss =
    "{% for m in messages %}{{ '<seed:bos>' + m.role + '\\n' + ((m.content | trim) if m.role == "
    "'assistant' else m.content) + '<seed:eos>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<seed:bos>assistant\\n' }}{% endif %}";

constexpr std::string_view kGrok2 =
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{{ 'System: ' + (m.content | trim) + '<|separator|>\\n\\n' }}"
    "{% elif m.role == 'user' %}{{ 'Human: ' + (m.content | trim) + '<|separator|>\\n\\n' }}"
    "{% elif m.role == 'assistant' %}{{ 'Assistant: ' + m.content + '<|separator|>\\n\\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}";

constexpr std::string_view kMegrez =
    "{% for m in messages %}{{ '<|role_start|>' + m.role + '<|role_end|>' + m.content + "
    "'<|turn_end|>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|role_start|>assistant<|role_end|>' }}{% endif %}";

constexpr std::array<Builtin, 41> kBuiltins = {{
    {"chatml", "", kChatml},
    {"command-r", "", kCommandR},
    {"chatglm3", "", kChatglm3},
    {"chatglm4", "", kChatglm4},
    {"deepseek", "", kDeepseek},
    {"deepseek2", "", kDeepseek2},
    {"deepseek3", "", kDeepseek3},
    {"exaone3", "{% set with_tool = false %}", kExaone},
    {"exaone4", "{% set with_tool = true %}", kExaone},
    {"falcon3", "", kFalcon3},
    {"gemma", "", kGemma},
    {"gemma4", "", kGemma4},
    {"glmedge", "", kGlmEdge},
    {"gpt-oss", "", kGptOss},
    {"granite", "{% set keep_tool_role = true %}", kGranite},
    {"granite-4.0", "{% set keep_tool_role = false %}", kGranite},
    {"grok-2", "", kGrok2},
    {"kimi-k2", "", kKimiK2},
    {"llama2", "{% set with_system = false %}{% set bos_inside = false %}{% set strip = false %}",
     kLlama2},
    {"llama2-sys",
     "{% set with_system = true %}{% set bos_inside = false %}{% set strip = false %}", kLlama2},
    {"llama2-sys-bos",
     "{% set with_system = true %}{% set bos_inside = true %}{% set strip = false %}", kLlama2},
    {"llama2-sys-strip",
     "{% set with_system = true %}{% set bos_inside = false %}{% set strip = true %}", kLlama2},
    {"llama3", "", kLlama3},
    {"llama4", "", kLlama4},
    {"megrez", "", kMegrez},
    {"minicpm", "", kMinicpm},
    {"mistral-v1", "{% set lead = ' ' %}{% set trail = ' ' %}{% set trim_reply = false %}",
     kMistralTurns},
    {"mistral-v3", "{% set lead = '' %}{% set trail = ' ' %}{% set trim_reply = true %}",
     kMistralTurns},
    {"mistral-v3-tekken", "{% set lead = '' %}{% set trail = '' %}{% set trim_reply = false %}",
     kMistralTurns},
    {"mistral-v7", "{% set sp = ' ' %}", kMistralV7},
    {"mistral-v7-tekken", "{% set sp = '' %}", kMistralV7},
    {"monarch", "", kMonarch},
    {"openchat", "", kOpenchat},
    {"orion", "", kOrion},
    {"phi3", "", kPhi3},
    {"phi4", "", kPhi4},
    {"seed_oss", "", kSeedOss},
    {"smolvlm", "", kSmolvlm},
    {"vicuna", "{% set orca = false %}", kVicuna},
    {"vicuna-orca", "{% set orca = true %}", kVicuna},
    {"zephyr", "", kZephyr},
}};

// Names people also use for these formats.
struct Alias {
  std::string_view name;
  std::string_view target;
};
constexpr std::array<Alias, 10> kAliases = {{
    {"qwen", "chatml"},
    {"qwen2", "chatml"},
    {"qwen3", "chatml"},
    {"smollm", "chatml"},
    {"gemma2", "gemma"},
    {"gemma3", "gemma"},
    {"llama-3", "llama3"},
    {"phi-3", "phi3"},
    {"phi-4", "phi4"},
    // Mistral's current models (Small 3.x, Magistral) use the v7 "tekken" format.
    {"mistral", "mistral-v7-tekken"},
}};

}  // namespace

std::optional<std::string> builtin_template_source(std::string_view name) {
  for (const Alias& alias : kAliases) {
    if (alias.name == name) name = alias.target;
  }
  for (const Builtin& b : kBuiltins) {
    if (b.name == name) return std::string(b.settings) + std::string(b.body);
  }
  return std::nullopt;
}

std::vector<std::string> builtin_template_names() {
  std::vector<std::string> names;
  for (const Builtin& b : kBuiltins) names.emplace_back(b.name);
  for (const Alias& a : kAliases) names.emplace_back(a.name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace inferd::tokenizer
