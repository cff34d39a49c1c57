#!/usr/bin/env python3
"""Embeds Lua scripts as C strings: embed_lua.py OUT.c OUT.h SCRIPT.lua...
Each script foo.lua becomes `const char lua_foo[]` in OUT.c, declared in OUT.h."""
import os
import sys

out_c, out_h, scripts = sys.argv[1], sys.argv[2], sys.argv[3:]
names = [os.path.splitext(os.path.basename(s))[0] for s in scripts]
with open(out_h, "w") as h:
    h.write("#pragma once\n")
    for n in names:
        h.write(f"extern const char lua_{n}[];\n")
with open(out_c, "w") as c:
    c.write('#include "lua_scripts.h"\n')
    for n, path in zip(names, scripts):
        with open(path, "rb") as f:
            data = f.read()
        body = "".join(f"\\x{b:02x}" for b in data)
        c.write(f'const char lua_{n}[] = "{body}";\n')
