#!/usr/bin/env python3
"""Embeds Lua scripts as C strings: embed_lua.py OUT.c OUT.h NAME=FILE[+FILE...]...
Each NAME becomes `const char lua_NAME[]` in OUT.c, declared in OUT.h: its files joined in
order, one script (a script too long for one file is split along its seams)."""
import sys

out_c, out_h, specs = sys.argv[1], sys.argv[2], sys.argv[3:]
scripts = [(name, paths.split("+")) for name, paths in (spec.split("=", 1) for spec in specs)]
with open(out_h, "w") as h:
    h.write("#pragma once\n")
    for name, _ in scripts:
        h.write(f"extern const char lua_{name}[];\n")
with open(out_c, "w") as c:
    c.write('#include "lua_scripts.h"\n')
    for name, paths in scripts:
        data = b""
        for path in paths:
            with open(path, "rb") as f:
                data += f.read()
        body = "".join(f"\\x{b:02x}" for b in data)
        c.write(f'const char lua_{name}[] = "{body}";\n')
