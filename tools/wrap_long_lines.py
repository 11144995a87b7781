"""Bring every line of the given Python files to <= 110 columns without changing what the code means.

Rewraps comments and docstrings, moves long trailing comments above their line and splits long string literals
into adjacent pieces; a file whose AST would change is left alone. Run `ruff format` before and after it.
"""

import argparse
import ast
import io
import re
import sys
import textwrap
import tokenize
import unicodedata
from collections import Counter
from pathlib import Path

LIMIT = 110
# A comment or docstring line at least this wide was wrapped for width, so the next one continues it.
FILLED = 80
KEEP_WORDS = {"break_long_words": False, "break_on_hyphens": False}
PRAGMA = re.compile(r"#!|#\s*(noqa|type:|pragma|fmt:|isort|pylint|pyright|mypy|ruff:|-\*-)")
LIST_ITEM = re.compile(r"([-*+]|\d+[.)])\s+(?=\S)")
VERBATIM = re.compile(r"(>>>|\.\.\.|\||\+[-=]|```|'''|\"\"\")")
RULE = re.compile(r"(.*?)([-=#*~_])\2{3,}\s*$")
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", "node_modules"}


def width(text):
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def overlong(line):
    """Whether ruff's E501 flags `line`: single words, trailing URLs and pragma tails are let through, as ruff
    does."""
    line = re.sub(r"\s*#\s*(noqa|type:|pyright:|pylint:|nosec|isort:|ruff:)\S*.*$", "", line.rstrip("\n"))
    if width(line) <= LIMIT:
        return False
    chunks = line.split()
    if len(chunks) == 1 or (len(chunks) == 2 and chunks[0] == "#"):
        return False
    return not ("://" in chunks[-1] and width(line) - width(chunks[-1]) <= LIMIT)


def docstrings(tree):
    """The docstring constants of a module, class or function."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        doc = body[0].value if isinstance(body, list) and body and isinstance(body[0], ast.Expr) else None
        if isinstance(doc, ast.Constant) and isinstance(doc.value, str):
            yield doc


def meaning(source):
    """The AST as a string, docstrings compared with their whitespace collapsed (reflowing them is
    allowed); None for a syntax error."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for doc in docstrings(tree):
        doc.value = " ".join(doc.value.split())
    return ast.dump(tree)


def reflow(rows, first_cont):
    """Rewrap the prose paragraphs of `rows` (lead, text) that hold an overlong line; other rows stay as they
    are. `first_cont` is the lead that continues the first row (a docstring's opening line differs)."""
    out, hang, fenced, i = [], 0, False, 0
    while i < len(rows):
        lead, text = rows[i]
        extra = len(text) - len(text.lstrip())
        item = LIST_ITEM.match(text.lstrip())
        fenced ^= text.lstrip().startswith("```")
        prose = (
            text.strip() and (item or extra in (0, hang)) and not (fenced or VERBATIM.match(text.lstrip()))
        )
        hang = extra + item.end() if item else (hang if extra == hang and text.strip() else 0)
        if not (prose and overlong(lead + text)) or text.rstrip().endswith("\\"):
            out.append(lead + text)
            i += 1
            continue
        nxt = rows[i + 1][1] if i + 1 < len(rows) else ""
        hanging = len(nxt) - len(nxt.lstrip())
        if not item and hang == 0 and 0 < hanging <= 4 and not text.rstrip().endswith(":"):
            hang = hanging  # a label's text that goes on under it, indented: `# int8: ...` then `#   more`
        cont = (first_cont if i == 0 else lead) + " " * hang
        j = i + 1
        while j < len(rows) and _continues(rows[j - 1], rows[j], hang, cont):
            j += 1
        words = " ".join(" ".join(t for _, t in rows[i:j]).split())
        out += textwrap.wrap(
            words, LIMIT, initial_indent=lead + text[:extra], subsequent_indent=cont, **KEEP_WORDS
        )
        i = j
    return out


def _continues(prev, row, hang, cont):
    """Whether `row` goes on with the paragraph that `prev` is in."""
    body, filled = row[1][hang:], width(prev[0] + prev[1]) >= FILLED
    if row[0] + row[1][:hang] != cont or not filled or prev[1].rstrip().endswith(("\\", ":")):
        return False
    return bool(re.match(r"\S", body)) and not any(p.match(body) for p in (LIST_ITEM, VERBATIM, PRAGMA))


def comment_block(lines, tokens, tok):
    """Rewrap the run of full-line comments around `tok` (same column, consecutive lines)."""
    col = tok.start[1]
    rows = {
        t.start[0]: t.string
        for t in tokens
        if t.type == tokenize.COMMENT and t.start[1] == col and not lines[t.start[0] - 1][:col].strip()
    }
    first = last = tok.start[0]
    while first - 1 in rows:
        first -= 1
    while last + 1 in rows:
        last += 1
    split = []
    for row in range(first, last + 1):
        # a pragma is one unbreakable lead with no text, so it is never rewrapped nor joined
        mark = rows[row] if PRAGMA.match(rows[row]) else re.match(r"#+:?\s?", rows[row]).group()
        lead, text = lines[row - 1][:col] + mark, rows[row][len(mark) :]
        rule = RULE.match(text)  # a section rule (`# -- name -----`) is shortened to fit, not wrapped
        if rule and overlong(lead + text):
            text = rule[1] + rule[2] * max(4, LIMIT - width(lead + rule[1]))
        split.append((lead, text))
    return first, last, reflow(split, split[0][0])


def docstring(lines, tok):
    """Rewrap a docstring's long prose paragraphs, its indentation, lists and verbatim blocks kept."""
    first, last = tok.start[0], tok.end[0]
    opening = re.match(r"[A-Za-z]*('''|\"\"\")", tok.string).group()
    head = lines[first - 1][: tok.start[1]] + opening
    head += " " if re.match(r" ['\"]", lines[first - 1][len(head) :]) else ""  # `""" "quoted" start`
    rows = [(head, lines[first - 1][len(head) :].rstrip("\n"))]
    for row in range(first + 1, last + 1):
        text = lines[row - 1].rstrip("\n")
        indent = min(len(text) - len(text.lstrip()), tok.start[1])
        rows.append((text[:indent], text[indent:]))
    return first, last, reflow(rows, " " * tok.start[1])


def split_points(prefix, body):
    """Offsets in a string body where a piece may start: after a run of spaces, or between two f-string
    fields; never inside a field or a \\N{...} escape."""
    fstring, raw = "f" in prefix.lower(), "r" in prefix.lower()
    points, depth, closed, i = [], 0, -1, 0
    while i < len(body):
        ch = body[i]
        if depth == 0 and i and ((body[i - 1] == " " and ch != " ") or (i == closed and ch == "{")):
            points.append(i)
        if ch == "\\" and not raw:
            i = max(body.find("}", i) + 1 if body[i + 1 : i + 3] == "N{" else 0, i + 2)
            continue
        if fstring and ch in "{}" and depth == 0 and body[i + 1 : i + 2] == ch:
            i += 2
            continue
        if fstring and ch in "{}":
            depth += 1 if ch == "{" else -1
            closed = i + 1 if depth == 0 else closed
        elif depth and ch in "'\"":
            i = body.find(ch, i + 1) if ch in body[i + 1 :] else len(body)
        i += 1
    return points


def string_run(tokens, index):
    """The adjacent string literals (an implicit concatenation) that hold tokens[index], with only line
    breaks between them."""
    first = last = index
    while first > 0 and tokens[first - 1].type in (tokenize.STRING, tokenize.NL):
        first -= 1
    while tokens[last + 1].type in (tokenize.STRING, tokenize.NL):
        last += 1
    return [t for t in tokens[first : last + 1] if t.type == tokenize.STRING]


def merge_run(run):
    """(prefix, quote, body, boundaries) of one literal equal to the run, in f-string form (literal braces
    doubled) if any piece is an f-string; None when the pieces' quotes or kinds differ."""
    parts = [re.match(r"([A-Za-z]*)('\'\'|\"\"\"|'|\")", t.string).groups() for t in run]
    kinds = {(quote, "r" in p.lower(), "b" in p.lower()) for p, quote in parts}
    fstring = any("f" in p.lower() for p, _ in parts)
    if len(kinds) > 1 or any(t.start[0] != t.end[0] for t in run):
        return None
    body, bounds = "", []
    for tok, (p, quote) in zip(run, parts):
        text = tok.string[len(p) + len(quote) : -len(quote)]
        if fstring and "f" not in p.lower():
            if "\\N{" in text:
                return None
            text = text.replace("{", "{{").replace("}", "}}")
        bounds.append(len(body))
        body += text
    prefix = "".join(c for c in parts[0][0] if c not in "fF") + ("f" if fstring else "")
    return prefix, parts[0][1], body, bounds[1:]


def string_layout(lines, tokens, index, run):
    """Where the pieces of a string (or of the run it belongs to) go: (column of the first, column of the
    others, text after the last, and False to split in place, "parens" to parenthesize or "bracket" to move
    inside the bracket it fills), or None where it cannot be split (a concatenation outside brackets)."""
    tok, (row, col) = tokens[index], run[0].start
    line = lines[row - 1].rstrip("\n")
    depth = sum(
        {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(t.string, 0)
        for t in tokens[:index]
        if t.type == tokenize.OP
    )
    tail = lines[run[-1].end[0] - 1].rstrip("\n")[run[-1].end[1] :]
    if depth > 0 and (len(run) > 1 or not line[:col].strip()):  # lay out the concatenation where it stands
        rest = [t.start[1] for t in run if t.start[0] != row] or [col]
        return col, rest[0], tail, False
    if len(run) > 1:
        return None
    indent = len(line) - len(line.lstrip())
    code = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT)]
    at = code.index(tok)
    alone = code[at - 1].string in "([{" and code[at + 1].string in ")]}"  # its bracket's only item
    return indent + 4, indent + 4, "", "bracket" if alone else "parens"


def split_string(lines, tokens, index):
    """Split a one-line string, or lay out again the concatenation it belongs to, as adjacent pieces one a
    line; None when it has no place to split."""
    run = string_run(tokens, index)
    if merge_run(run) is None:  # pieces that cannot be joined (quotes differ): split this one alone
        run = [tokens[index]]
    merged, layout = merge_run(run), string_layout(lines, tokens, index, run)
    if merged is None or layout is None:
        return None
    (first, rest, tail, parens), (prefix, quote, body, bounds) = layout, merged
    pieces, start, points = [], 0, sorted(set(split_points(prefix, body) + bounds))
    while True:
        room = LIMIT - (rest if pieces else first) - len(prefix) - 2 * len(quote)
        if width(body[start:]) + width(tail) <= room or not points:
            break
        fit = [p for p in points if width(body[start:p]) <= room] or points[:1]
        pieces.append(body[start : fit[-1]])
        start, points = fit[-1], [p for p in points if p > fit[-1]]
    if not (pieces or len(run) > 1) and not (parens and len(run[0].string) >= LIMIT // 3):
        return None
    text = [" " * rest + literal(prefix, quote, p) for p in [*pieces, body[start:]]]
    (row, col), end = run[0].start, run[-1].end[0]
    line = lines[row - 1].rstrip("\n")
    if not parens:
        body = [*text[:-1], text[-1] + tail]
        return row, end, [line[:col] + body[0].lstrip(), *body[1:]]
    after = lines[end - 1].rstrip("\n")[run[-1].end[1] :]
    if parens == "bracket":
        return row, end, [line[:col], *text, " " * (first - 4) + after]
    return row, end, [line[:col] + "(", *text, " " * (first - 4) + ")" + after]


def literal(prefix, quote, body):
    """A piece of a split string: an f-string only where it holds a field, its doubled braces undone if
    not."""
    if "f" in prefix and "{" not in body.replace("{{", "").replace("}}", ""):
        prefix, body = prefix.replace("f", ""), body.replace("{{", "{").replace("}}", "}")
    return prefix + quote + body + quote


def break_at_comma(lines, tokens, row):
    """Break a bracketed line that the formatter leaves alone (under `# fmt: off`) after its last comma that
    fits, the rest aligned after the bracket that holds that comma."""
    line, stack, best = lines[row - 1].rstrip("\n"), [], None
    for tok in tokens:
        if tok.start[0] > row:
            break
        if tok.type == tokenize.OP and tok.string in "([{":
            stack.append(tok.start[1] + 1)
        elif tok.type == tokenize.OP and tok.string in ")]}":
            stack.pop()
        elif tok.string == "," and tok.start[0] == row and stack and width(line[: tok.end[1]]) <= LIMIT:
            rest = line[tok.end[1] :].strip()
            best = (tok.end[1], stack[-1]) if rest and rest[0] not in ")]}#" else best
    if best is None:
        return None
    return row, row, [line[: best[0]], " " * best[1] + line[best[0] :].lstrip()]


def move_comment(lines, tokens, tok):
    """Put a trailing comment on its own line above the statement line it ends."""
    row = tok.start[0]
    top = min(t.start[0] for t in tokens if t.end[0] == row and t.type != tokenize.COMMENT)
    if top > 1 and lines[top - 2].rstrip("\n").endswith("\\"):
        return None
    indent = re.match(r"\s*", lines[top - 1]).group()
    code = lines[row - 1][: tok.start[1]].rstrip()
    body = [line.rstrip("\n") for line in lines[top - 1 : row - 1]] + [code]
    return top, row, [indent + tok.string, *body]


def find_fix(lines, tokens, docs, row, code):
    """(kind, (first, last, new_lines)) for an overlong line, or (reason, None) when it has no automatic fix;
    without `code`, only comments and docstrings are fixed."""
    on_row = [i for i, t in enumerate(tokens) if t.start[0] <= row <= t.end[0]]
    for tok in (tokens[i] for i in on_row if tokens[i].type == tokenize.STRING):
        if tok.start in docs and re.match(r"[A-Za-z]*('\'\'|\"\"\")", tok.string):
            return "docstring", docstring(lines, tok)
        if tok.start[0] != tok.end[0] and (row < tok.end[0] or overlong(lines[row - 1][: tok.end[1]])):
            return "multi-line string (its value would change)", None
    for tok in (tokens[i] for i in on_row if tokens[i].type == tokenize.COMMENT):
        if not lines[row - 1][: tok.start[1]].strip():
            return "comment", comment_block(lines, tokens, tok)
        if not PRAGMA.match(tok.string):
            return "trailing comment", move_comment(lines, tokens, tok)
    if not code:
        return "code (left for the run after ruff format)", None
    strings = [(len(tokens[i].string), i) for i in on_row if tokens[i].type == tokenize.STRING]
    longest = max(strings)[1] if strings else None
    crosses = longest is not None and overlong(lines[row - 1][: tokens[longest].end[1]])
    tries = [("string", split_string)] if crosses else []
    tries += [("comma", None)] + ([("string", split_string)] if strings and not crosses else [])
    for kind, make in tries:
        fix = make(lines, tokens, longest) if make else break_at_comma(lines, tokens, row)
        if fix is not None:
            return kind, fix
    return "code with nowhere to break", None


def fix_pass(source, skip, code):
    """Fix each overlong line once (fixes that overlap wait for the next pass); returns the new source, the
    count of lines fixed by kind, the unfixed lines as {row: reason} and the fixes made."""
    lines = source.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    docs = {(doc.lineno, doc.col_offset) for doc in docstrings(ast.parse(source))}
    fixes, counts, left = [], Counter(), {}
    for row, line in enumerate(lines, 1):
        if not overlong(line):
            continue
        if fixes and row <= fixes[-1][1][1]:  # already rewritten by the fix of a line above
            counts[fixes[-1][0]] += 1
            continue
        kind, fix = find_fix(lines, tokens, docs, row, code)
        old = [x.rstrip("\n") for x in lines[fix[0] - 1 : fix[1]]] if fix else None
        if fix is None or fix[2] == old or tuple(old) in skip:
            left[row] = kind if fix is None else f"{kind}: no automatic fix"
        elif not fixes or fix[0] > fixes[-1][1][1]:
            fixes.append((kind, fix))
            counts[kind] += 1
    for _, (first, last, new) in reversed(fixes):
        lines[first - 1 : last] = [x + "\n" for x in new]
    return "".join(lines), counts, left, fixes


def wrap_file(path, noqa, code):
    """Rewrite `path` until no pass changes it; returns (lines fixed by kind, unfixed lines)."""
    source = original = path.read_text(encoding="utf-8")
    want, total, skip = meaning(original), Counter(), set()
    for _ in range(30):
        new, counts, left, fixes = fix_pass(source, skip, code)
        if new == source:
            break
        if meaning(new) != want:  # find the fix that changes the meaning and never try it again
            for _, (first, last, new_lines) in fixes:
                lines = source.splitlines(keepends=True)
                old, lines[first - 1 : last] = lines[first - 1 : last], [x + "\n" for x in new_lines]
                if meaning("".join(lines)) != want:
                    skip.add(tuple(x.rstrip("\n") for x in old))
            continue
        source, total = new, total + counts
    if noqa:
        source, left = add_noqa(source, left)
    if source != original and meaning(source) == want:
        path.write_text(source, encoding="utf-8")
    elif source != original:  # every fix was checked, so this is a bug here: refuse the file
        return Counter(), {1: "the rewrite would change what the file means; left as it was"}
    return total, left


def add_noqa(source, left):
    """Mark the lines no fix could shorten with `# noqa: E501` (a multi-line string's mark goes after its end,
    which ruff reads as covering the whole string); returns the source and the lines still unmarked."""
    lines = source.splitlines(keepends=True)
    ends, comments = {}, set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        ends.update((row, tok.end[0]) for row in range(tok.start[0], tok.end[0]))
        comments.update([tok.start[0]] if tok.type == tokenize.COMMENT else [])
    unmarked, marked = {}, set()
    for row, reason in left.items():
        end = ends.get(row, row)
        line = lines[end - 1].rstrip("\n")
        if end in comments or line.endswith("\\"):
            unmarked[row] = reason
        elif end not in marked:
            marked.add(end)
            lines[end - 1] = line + "  # noqa: E501\n"
    return "".join(lines), unmarked


def python_files(paths):
    for path in map(Path, paths):
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from sorted(p for p in path.rglob("*.py") if not SKIP_DIRS & set(p.parts))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="files, or folders searched for *.py")
    parser.add_argument("--noqa", action="store_true", help="mark lines left too long with # noqa: E501")
    parser.add_argument(
        "--before-format",
        action="store_true",
        help="fix only comments and docstrings: a run before ruff format, which would otherwise "
        "split a line's code to fit its trailing comment",
    )
    args = parser.parse_args(argv)
    total, left_count = Counter(), 0
    for path in python_files(args.paths):
        counts, left = wrap_file(path, args.noqa, not args.before_format)
        total += counts
        left = {} if args.before_format else left  # code lines wait for the run after ruff format
        for row, reason in sorted(left.items()):
            print(f"{path}:{row}: {reason}")
        left_count += len(left)
    for kind, count in total.most_common():
        print(f"fixed {count} overlong lines: {kind}", file=sys.stderr)
    print(f"left {left_count} overlong lines to fix by hand", file=sys.stderr)
    return 1 if left_count else 0


if __name__ == "__main__":
    sys.exit(main())
