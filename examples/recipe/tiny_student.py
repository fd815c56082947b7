"""The recipe's student: the built-in ``tiny`` model (seed 0) saved as a checkpoint with a
compact chat template of its own, ``python examples/recipe/tiny_student.py OUT``.

The project's ChatML lists tools in a ~580-token preamble and JSON schema; for a byte-level
5M-parameter model that is 70% of every episode. This template lists each tool as
``name: arg,...`` in the system turn, renders tool results as ``<tool_response>`` blocks and
assistant turns as the model wrote them (its ``<tool_call>`` blocks), so the history stays a
token prefix of the next prompt. The Policy and ``forge sft`` honour a checkpoint's own
template, so nothing else changes.
"""

from __future__ import annotations

import sys

TEMPLATE = (  # Hugging Face renders with trim_blocks: a newline after a tag is a string
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t.function.name }}: "
    "{{ t.function.parameters.properties | list | join(',') }}{{ '\\n' }}{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def main(out: str, seed: int = 0) -> None:
    from serve.models import build_tiny

    model, tok = build_tiny(seed)
    tok.chat_template = TEMPLATE
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"tiny (seed {seed}) with its compact template -> {out}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
