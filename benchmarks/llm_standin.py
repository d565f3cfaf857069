"""An LLM stand-in for `kfoundry optimize --llm cmd:...` runs where no model can be reached (the GPU
machine). It is not a model: it reads the prompt on stdin and answers deterministically.

- no parent in the prompt (the initializer): the kernel file given on the command line;
- a parent: the parent's code (the first fenced block after "## Parent") with one tunable number
  changed (a block size doubled or halved, or num_warps), chosen by the call count;
- the insight distiller: one line summarizing the steps it was shown.

Every prompt is appended to PROMPT_LOG (NUL-separated), so a run's prompts can be read afterwards.

    python benchmarks/llm_standin.py KERNEL_FILE PROMPT_LOG
"""

import re
import sys
from pathlib import Path

kernel, log = Path(sys.argv[1]), Path(sys.argv[2])
prompt = sys.stdin.read()
with log.open("a", encoding="utf-8") as handle:
    handle.write(prompt + "\n\x00\n")
calls = log.read_text(encoding="utf-8").count("\n\x00\n")

if "You keep the experience library" in prompt:
    steps = re.findall(r"expert `(\w+)`.*?speedup (\S+) -> (\S+)", prompt)
    better = [s for s in steps if s[1] != s[2]]
    print(f"- Stand-in summary: {len(steps)} recorded steps, {len(better)} changed the speedup; "
          "block-size and num_warps changes were the edits tried.")
    sys.exit(0)

at = prompt.find("## Parent")  # retrieved kernels come earlier in the prompt: they are not the parent
fences = re.findall(r"```(?:python)?\n(.*?)```", prompt[at:], flags=re.DOTALL) if at >= 0 else []
parents = [f for f in fences if "class ModelNew" in f]
if not parents:
    print("```python\n" + kernel.read_text(encoding="utf-8") + "```")
    sys.exit(0)

source = parents[0]
numbers = [m for m in re.finditer(r"\b(BLOCK\w*|num_warps)\s*=\s*(\d+)", source)]
if not numbers:
    print("```python\n" + source + "```")
    sys.exit(0)
match = numbers[calls % len(numbers)]
value = int(match.group(2))
if match.group(1) == "num_warps":
    new = {1: 2, 2: 4, 4: 8, 8: 4, 16: 8}.get(value, 4)
else:
    new = value * 2 if (calls // len(numbers)) % 2 == 0 and value < 4096 else max(value // 2, 16)
edited = source[:match.start(2)] + str(new) + source[match.end(2):]
print(f"Changed {match.group(1)} from {value} to {new}.\n\n```python\n{edited}```")
