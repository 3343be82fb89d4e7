"""The passes over memory of an XLA program, read from its optimized HLO text.

XLA's CPU backend runs a program's top-level instructions (fusions, dots, reductions) one
after another, each as its own loop over its operands. So the bytes an update moves are, at
least, each such instruction's array operands read once and its output written once: a
fusion that reads g and m and writes m moves 12 bytes per float32 element, whatever it
computes inside. `passes` lists them from the text that
`tf.function(..., jit_compile=True).experimental_get_compiler_ir(...)(stage="optimized_hlo")`
returns, so the bytes an update's compiled code moves per parameter can be set against the
one-pass floor (28 bytes for an Adam-like update: read x, g, m, v, write x, m, v).

This counts each operand once: a loop that reads an operand twice, or that spills inside, moves
more. It is a lower bound for the code XLA chose, read from that code, not a timing.
"""
import re
import sys

# HLO instructions that are no loop of their own
_NOT_A_PASS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
# `%name = type op(operands), attributes`; a tuple type is parenthesised
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%(?P<name>[^\s=]+) = (?P<type>\([^()]*\)|\S+) "
    r"(?P<op>[a-z][a-z0-9-]*)\((?P<operands>[^()]*)\)")
_ARRAY = re.compile(r"\b(?P<dtype>pred|[a-z]+\d+)\[(?P<dims>[\d,]*)\]")
_OPERAND = re.compile(r"%(?P<name>[^\s,()]+)")
_BYTES_PER_ELEMENT = {"pred": 1, "s8": 1, "u8": 1, "f16": 2, "bf16": 2, "s16": 2, "u16": 2,
                      "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}


def type_bytes(type_text):
    """Bytes of every array in an HLO type (`f32[30522,768]{1,0}`, or a tuple of them)."""
    total = 0
    for array in _ARRAY.finditer(type_text):
        elements = 1
        for dimension in filter(None, array["dims"].split(",")):
            elements *= int(dimension)
        total += _BYTES_PER_ELEMENT[array["dtype"]] * elements
    return total


def entry_instructions(hlo_text):
    """[(name, type, op, [operand names])] of the ENTRY computation, in program order."""
    lines = hlo_text.splitlines()
    start = next((index for index, line in enumerate(lines) if line.startswith("ENTRY ")), None)
    if start is None:
        raise ValueError("no ENTRY computation in this HLO text")
    instructions = []
    for line in lines[start + 1:]:
        if line.startswith("}"):
            break
        match = _INSTRUCTION.match(line)
        if match:
            operands = [operand["name"] for operand in _OPERAND.finditer(match["operands"])]
            instructions.append((match["name"], match["type"], match["op"], operands))
    return instructions


def passes(hlo_text, smallest_bytes=0):
    """[(name, op, bytes read, bytes written)] of the ENTRY computation's loops that read or
    write at least `smallest_bytes` (0: all; e.g. a hundredth of a variable's bytes leaves
    out the scalar arithmetic)."""
    instructions = entry_instructions(hlo_text)
    types = {name: type_text for name, type_text, _, _ in instructions}
    found = []
    for name, type_text, op, operands in instructions:
        if op in _NOT_A_PASS:
            continue
        read = sum(type_bytes(types[operand]) for operand in operands)
        written = type_bytes(type_text)
        if max(read, written) >= smallest_bytes:
            found.append((name, op, read, written))
    return found


def bytes_per_parameter(loops, parameters):
    """(bytes read, bytes written) of `passes`' loops, per parameter."""
    return (sum(read for _, _, read, _ in loops) / parameters,
            sum(written for _, _, _, written in loops) / parameters)


if __name__ == "__main__":  # run alone it would do nothing: say what to run instead
    print("error: benchmarks/hlo_passes.py is a module of the benchmark scripts, used by "
          "optimizer_step.py --passes and update_anatomy.py --passes; "
          "run one of those (--help lists its flags)", file=sys.stderr)
    sys.exit(2)
