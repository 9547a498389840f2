#!/usr/bin/env python3
"""check_docs.py: the README and the manual (docs/*.md) cannot drift from
the code. Run by tests/check_docs.sh after its path check; the rules are
in docs/README.md, "Docs that cannot drift":

  anchors    every link's #anchor is a heading of the page it points to
             (GitHub's slugs: lower case, punctuation but - and _ dropped,
             spaces to -, a repeated heading gets -1, -2, ...);
  blocks     every ```sh run``` block runs (bash -e -o pipefail, from the
             top of the repository, a page's blocks in order) and prints
             what the ```output``` block after it shows; «…» matches any
             text in a line, a line of «…» alone any number of lines;
  keys       the key tables of planner/sema.c (arrays named *KEYS or keys)
             against docs/language.md, both ways: each table's keys in
             backquotes in the section KEY_SECTIONS maps it to, and each
             key a table row of the page names in some table of sema.c;
  commands   planc's subcommands (cli/planc.c's table) and every option
             cli/*.c compares an argument with, against `planc --help`,
             `planc CMD --help` and docs/commands.md; the generated
             program's options (runtime/par/run.c) against its --help and
             docs/codegen.md.

usage: tests/check_docs.py [--list] [--no-run] [--sema=C --language=MD --commands=MD --cli=DIR --run=C --codegen=MD] FILE.md...
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANC = os.environ.get('PLANC') or os.path.join(ROOT, 'build', 'bin', 'planc')   # make test-docs passes its tree's
WILD = '«…»'
# what is checked against what; tests/docs.mk points these at broken copies
# (--sema=PATH ...) to see each check fail
SRC = {'sema': 'planner/sema.c', 'language': 'docs/language.md', 'commands': 'docs/commands.md', 'cli': 'cli',
       'run': 'runtime/par/run.c', 'codegen': 'docs/codegen.md'}
BLOCK_TIMEOUT_S = 300          # the tour's training run takes seconds; a hang must not stall make test
fails = 0


def fail(msg):
    global fails
    fails += 1
    print('FAIL ' + msg)


def fences(lines):
    """Yield (start line index, info string, body lines) of each fenced block."""
    i = 0
    while i < len(lines):
        m = re.match(r'^(`{3,})(.*)$', lines[i])
        if not m:
            i += 1
            continue
        tick, info, start = m.group(1), m.group(2).strip(), i
        i += 1
        body = []
        while i < len(lines) and not re.match('^' + tick + '`*\\s*$', lines[i]):
            body.append(lines[i])
            i += 1
        yield start, info, body, i
        i += 1


def prose(lines):
    """The lines outside fenced blocks, with their indices."""
    inside = set()
    for start, _, _, end in fences(lines):
        inside.update(range(start, end + 1))
    return [(i, l) for i, l in enumerate(lines) if i not in inside]


def slug(heading):
    h = heading.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')


def anchors_of(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        lines = open(path, encoding='utf-8').read().split('\n')
        for _, l in prose(lines):
            m = re.match(r'^#{1,6} (.*)$', l)
            if not m:
                continue
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else '%s-%d' % (s, n))
        cache[path] = out
    return cache[path]


def check_anchors(doc, lines):
    n = 0
    for i, l in prose(lines):
        for target, anchor in re.findall(r'\]\(([^)#:\s]*)#([^)\s]+)\)', l):
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target)) if target else doc
            if not path.endswith('.md') or not os.path.exists(path):
                continue        # the path check (check_docs.sh) reports a missing file
            n += 1
            if anchor not in anchors_of(path):
                fail('%s:%d: link to %s#%s: %s has no such heading' % (doc, i + 1, target or doc, anchor, path))
    return n


def line_matcher(shown_line):
    return re.compile('.*?'.join(re.escape(p) for p in shown_line.split(WILD)))


def matches(shown, got):
    """Whether the printed lines GOT are what the page shows: a shown line
    matches one printed line (with «…» any text in it), a line of «…»
    alone any number of lines."""
    pats = [None if l.strip() == WILD else line_matcher(l) for l in shown]
    ok = {(len(pats), len(got))}         # (shown index, printed index) pairs that match to the end
    for i in range(len(pats) - 1, -1, -1):
        for j in range(len(got), -1, -1):
            if pats[i] is None:
                if (i + 1, j) in ok or (j < len(got) and (i, j + 1) in ok):
                    ok.add((i, j))
            elif j < len(got) and pats[i].fullmatch(got[j]) and (i + 1, j + 1) in ok:
                ok.add((i, j))
    return (0, 0) in ok


def runnable(lines):
    """(line, script, shown output or None) of each ```sh run``` block."""
    blocks = list(fences(lines))
    out = []
    for k, (start, info, body, end) in enumerate(blocks):
        if info.split() != ['sh', 'run']:
            continue
        shown = None
        if k + 1 < len(blocks):
            nstart, ninfo, nbody, _ = blocks[k + 1]
            if ninfo == 'output' and all(not l.strip() for l in lines[end + 1:nstart]):
                shown = nbody
        out.append((start + 1, '\n'.join(body) + '\n', shown))
    return out


def run_blocks(doc, lines):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1',
               OPENBLAS_NUM_THREADS='1', LC_ALL='C')
    n = 0
    for line, script, shown in runnable(lines):
        n += 1
        try:
            p = subprocess.run(['bash', '-e', '-o', 'pipefail', '-c', script], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            fail('%s:%d: the runnable block ran past %d s' % (doc, line, BLOCK_TIMEOUT_S))
            continue
        got = p.stdout.decode('utf-8', 'replace').rstrip('\n')
        if p.returncode != 0:
            fail('%s:%d: the runnable block exited %d; it printed:\n%s' % (doc, line, p.returncode, got[-3000:]))
            continue
        if shown is not None and not matches(shown, got.split('\n')):
            fail('%s:%d: the runnable block printed what the page does not show\n--- shown\n%s\n--- printed\n%s'
                 % (doc, line, '\n'.join(shown), got[-3000:]))
    return n


def c_tables(path, name_rx):
    """The strings of every `static const char *const NAME[] = { ... };` whose NAME
    matches, by NAME, or by FUNCTION:NAME for a table local to a function."""
    src = open(os.path.join(ROOT, path), encoding='utf-8').read()
    lines = src.split('\n')
    out = {}
    for m in re.finditer(r'static const char \*const (\w+)\[\]\s*=\s*\{(.*?)\};', src, re.S):
        if not re.search(name_rx, m.group(1)):
            continue
        name, ln = m.group(1), src.count('\n', 0, m.start())
        if lines[ln].startswith(' '):          # inside a function: name it by the function
            for j in range(ln - 1, -1, -1):
                f = re.match(r'^[A-Za-z_][\w \t*]*?\b(\w+)\(', lines[j])
                if f:
                    name = f.group(1) + ':' + name
                    break
        out.setdefault(name, []).extend(re.findall(r'"([^"]*)"', m.group(2)))
    return out


# Which section of language.md documents each key table of sema.c (by the
# heading that opens it; None: anywhere on the page). A new table in sema.c
# fails the check until it is mapped here and its keys written there.
KEY_SECTIONS = {
    'TOP_KEYS': None,
    'MODEL_KEYS': '`model NAME { ... }`', 'BLOCK_KEYS': '`model NAME { ... }`',
    'sema_embedding:keys': '`embedding { }`', 'sema_rope_scaling:keys': '`rope_scaling { }`',
    'sema_attention:keys': '`attention { }`', 'MLA_KEYS': '`attention { }`', 'sema_mlp:keys': '`mlp { }`', 'sema_moe:keys': '`moe { }`',
    'sema_final_norm:keys': '`norm { }`', 'sema_lm_head:keys': '`lm_head { }`',
    'CLUSTER_KEYS': '`cluster NAME { ... }`', 'DEVICE_KEYS': '`cluster NAME { ... }`',
    'LINK_KEYS': '`cluster NAME { ... }`',
    'PLAN_KEYS': '`plan { ... }`', 'sema_software:KEYS': '`plan { ... }`', 'sema_fp8:KEYS': '`plan { ... }`',
    'check_layout_moe:KEYS': '`plan { ... }`',
    'TRAIN_KEYS': '`train { ... }`', 'ADAMW_KEYS': '`train { ... }`',
}


def sections(lines):
    """heading text -> the words in backquotes of its section (to the next
    heading of its level or above)."""
    heads = []
    for i, l in prose(lines):
        m = re.match(r'^(#{1,6}) (.*)$', l)
        if m:
            heads.append((i, len(m.group(1)), m.group(2).strip()))
    out = {}
    for k, (i, lvl, text) in enumerate(heads):
        end = next((j for j, l2, _ in heads[k + 1:] if l2 <= lvl), len(lines))
        words = set()
        for _, l in prose(lines[i:end]):
            for span in re.findall(r'`([^`]*)`', l):
                words.update(re.findall(r'[A-Za-z_][\w-]*', span))
        out[text] = words
    return out


def check_keys():
    tables = c_tables(SRC['sema'], r'(KEYS|keys)$')
    accepted = set(k for ks in tables.values() for k in ks)
    if len(accepted) < 50:
        fail(SRC['sema'] + ': found only %d keys in its tables; has the table form changed?' % len(accepted))
    doc = SRC['language']
    lines = open(os.path.join(ROOT, doc), encoding='utf-8').read().split('\n')
    words = set()
    for _, l in prose(lines):
        for span in re.findall(r'`([^`]*)`', l):
            words.update(re.findall(r'[A-Za-z_][\w-]*', span))
    secs = sections(lines)
    for table, keys in sorted(tables.items()):
        if table not in KEY_SECTIONS:
            fail('%s: the key table %s is new: say in tests/check_docs.py (KEY_SECTIONS) which section of %s '
                 'documents it, and document its keys (%s) there' % (SRC['sema'], table, doc, ' '.join(keys)))
            continue
        head = KEY_SECTIONS[table]
        where = words if head is None else next((w for t, w in secs.items() if t.startswith(head)), None)
        if where is None:
            fail('%s has no section headed %s (for %s)' % (doc, head, table))
            continue
        for k in keys:
            if k not in where:
                fail('%s: the key `%s` (%s, %s) is accepted but not documented%s'
                     % (doc, k, SRC['sema'], table, '' if head is None else ' under ' + head))
    # the key column of every table whose header names one ("key" or "layer")
    rows, col, in_table = 0, -1, False
    for i, l in enumerate(lines):
        if not l.startswith('|'):
            in_table = False
            continue
        cells = [c.strip() for c in l.strip().strip('|').split('|')]
        if not in_table:        # the header row
            in_table = True
            col = next((j for j, c in enumerate(cells) if c in ('key', 'layer')), -1)
            continue
        if col < 0 or col >= len(cells) or set(l) <= set('|-: '):
            continue
        m = re.match(r'^`([A-Za-z_][\w-]*)', cells[col])
        if not m:
            continue
        rows += 1
        if m.group(1) not in accepted:
            fail('%s:%d: the table documents `%s`, which no key table of %s has'
                 % (doc, i + 1, m.group(1), SRC['sema']))
    return len(accepted), rows


def planc(*args):
    p = subprocess.run([PLANC] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.returncode, p.stdout.decode('utf-8', 'replace')


def check_commands():
    if not os.access(PLANC, os.X_OK):
        fail('%s is not built (make all)' % PLANC)
        return 0, 0
    cmds = [c for ks in c_tables(os.path.join(SRC['cli'], 'planc.c'), r'^cmds$').values() for c in ks]
    if len(cmds) < 5:
        fail(SRC['cli'] + '/planc.c: no command table (cmds) found')
    doc = open(os.path.join(ROOT, SRC['commands']), encoding='utf-8').read()
    rc, top = planc('--help')
    helps = {}
    for c in cmds:
        if not re.search(r'^  ' + re.escape(c) + r'\b', top, re.M):
            fail('planc --help does not list the command %s' % c)
        if not re.search(r'`planc ' + re.escape(c) + r'\b', doc):
            fail('%s does not document `planc %s`' % (SRC['commands'], c))
        rc, helps[c] = planc(c, '--help')
        if rc != 0:
            fail('planc %s --help exited %d' % (c, rc))
    # which commands each driver file serves: the handlers defined there
    nopts = 0
    for f in sorted(os.listdir(os.path.join(ROOT, SRC['cli']))):
        if not f.endswith('.c'):
            continue
        src = open(os.path.join(ROOT, SRC['cli'], f), encoding='utf-8').read()
        served = [c for c in cmds if re.search(r'^(?:static )?int (?:planc_)?cmd_' + c + r'\(', src, re.M)]
        opts = set(re.findall(r'strn?cmp\(\s*[\w\[\]*]+\s*,\s*"(-[-\w]+)"', src))
        for o in sorted(opts):
            nopts += 1
            text = top + ''.join(helps[c] for c in served)
            if not re.search(r'(?<![\w-])' + re.escape(o) + r'(?![\w-])', text):
                fail('%s/%s compares an argument with %s, which neither planc --help nor %s says'
                     % (SRC['cli'], f, o, ' '.join('planc %s --help' % c for c in served) or '(no command)'))
            if not re.search(r'(?<![\w-])' + re.escape(o) + r'(?![\w-])', doc):
                fail('%s/%s takes the option %s, which %s does not document' % (SRC['cli'], f, o, SRC['commands']))
    return len(cmds), nopts


def check_executable():
    """The generated program's options (runtime/par/run.c compares each
    argument with them) in its --help and in codegen.md's table."""
    out = os.path.join(ROOT, 'build', 'docs-exe')
    os.makedirs(out, exist_ok=True)
    exe = os.path.join(out, 'tiny')
    rc, text = planc('build', 'examples/tiny.plan', '-o', exe)
    if rc != 0:
        fail('planc build examples/tiny.plan exited %d:\n%s' % (rc, text))
        return 0
    p = subprocess.run([exe, '--help'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    helptext = p.stdout.decode('utf-8', 'replace')
    if p.returncode != 0:
        fail('the generated program\'s --help exited %d' % p.returncode)
    src = open(os.path.join(ROOT, SRC['run']), encoding='utf-8').read()
    doc = open(os.path.join(ROOT, SRC['codegen']), encoding='utf-8').read()
    opts = set(re.findall(r'strcmp\(\s*\w+\s*,\s*"(--[-\w]+)"', src))
    if len(opts) < 5:
        fail('%s: found only %d options; has the parser changed?' % (SRC['run'], len(opts)))
    for o in sorted(opts):
        word = r'(?<![\w-])' + re.escape(o) + r'(?![\w-])'
        if o != '--help' and not re.search(word, helptext):   # the usage is what --help prints
            fail('%s takes %s, which the generated program\'s --help does not say' % (SRC['run'], o))
        if not re.search(r'`' + re.escape(o) + r'[` ]', doc):
            fail('%s takes %s, which %s does not document' % (SRC['run'], o, SRC['codegen']))
    return len(opts)


def main(argv):
    listing = '--list' in argv
    run = '--no-run' not in argv
    for a in argv:
        m = re.match(r'^--(sema|language|commands|cli|run|codegen)=(.+)$', a)
        if m:
            SRC[m.group(1)] = m.group(2)
    docs = [a for a in argv if not a.startswith('--')]
    os.chdir(ROOT)
    nanchor = nblock = 0
    for doc in docs:
        lines = open(doc, encoding='utf-8').read().split('\n')
        if listing:
            for line, script, shown in runnable(lines):
                print('%s:%d: %s' % (doc, line, script.split('\n')[0]))
            continue
        nanchor += check_anchors(doc, lines)
        if run:
            nblock += run_blocks(doc, lines)
    if listing:
        return 0
    nkeys, nrows = check_keys()
    ncmds, nopts = check_commands()
    nexe = check_executable()
    print('docs: %d anchors resolve; %d runnable blocks ran; %d language keys documented, %d table rows accepted; '
          '%d commands and %d options in --help and commands.md; %d options of the generated program in its '
          '--help and codegen.md; %d failed'
          % (nanchor, nblock, nkeys, nrows, ncmds, nopts, nexe, fails))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
