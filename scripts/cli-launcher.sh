#!/bin/sh
# `make run`, before `serve` starts (it then blocks): put a `lowcostgpu` launcher on PATH where
# that needs no root and changes nothing of anyone else's, and say how to use the CLI.
#
# The launcher is a symbolic link ~/.local/bin/lowcostgpu -> this checkout's .venv/bin/lowcostgpu,
# made only when ~/.local/bin is on PATH and nothing else of that name is there (a link of ours
# from an earlier checkout is replaced). Otherwise nothing is written and the lines below say
# what to type (`source .venv/bin/activate`).
set -eu
venv="${1:-.venv}"
venv_bin="$(cd "$venv/bin" && pwd)"
target="$venv_bin/lowcostgpu"
dir="$HOME/.local/bin"
link="$dir/lowcostgpu"

on_path() {
    case ":$PATH:" in *":$1:"*) return 0 ;; esac
    return 1
}

ours() { # an existing link made by this script (into some checkout's .venv)
    [ -L "$link" ] && case "$(readlink "$link")" in */.venv/bin/lowcostgpu) return 0 ;; esac
    return 1
}

how=""
if on_path "$venv_bin"; then
    how="lowcostgpu is on your PATH (this .venv is active)"
elif on_path "$dir" && { [ ! -e "$link" ] && [ ! -L "$link" ] || ours; }; then
    ln -sfn "$target" "$link"
    how="installed a launcher: $link -> $target (remove it with: rm $link)"
fi

echo
echo "── the lowcostgpu CLI ─────────────────────────────────────────────────────────────"
if [ -n "$how" ]; then
    echo "  $how"
else
    echo "  the CLI is $target; in another terminal, put it on your PATH with"
    echo "      source $venv/bin/activate        (or: export PATH=\"$venv_bin:\$PATH\")"
fi
echo "  then, with the admin key serve prints below at its first start:"
echo "      lowcostgpu login                  # asks for the URL, then a key or the admin key"
echo "      lowcostgpu topup ACCOUNT 20.00 --admin-key KEY"
echo "      lowcostgpu prices                 # public: works before login"
echo "      lowcostgpu launch --gpu a100 --wait -- python3 -c 'print(42)'"
echo "  every command: lowcostgpu --help · the console: http://127.0.0.1:8080/console/"
echo "────────────────────────────────────────────────────────────────────────────────────"
echo
