#!/usr/bin/env bash
# Bash completion for the mkscope CLI from its own help text: the commands
# listed under COMMANDS in `mkscope --help`, each command's options from its
# `mkscope COMMAND --help`, and the options every command takes, so that the
# completion offers exactly what the help documents.
# usage: help2completion.sh MKSCOPE_BINARY > mkscope
set -euo pipefail
prog=$1
help=$("$prog" --help)
cmds=$(printf '%s\n' "$help" | awk '/^COMMANDS$/ {on=1; next} /^[A-Z]/ {on=0} on && /^  [a-z]/ {print $1}' | sort -u)
common=$(printf '%s\n' "$help" | awk '/^OPTIONS$/ {on=1; next} /^[A-Z]/ {on=0} on' |
         grep -oE '(^|[ ,])--?[a-zA-Z][a-zA-Z-]*' | tr -d ' ,' | sort -u | tr '\n' ' ')
cat <<HEAD
# bash completion for mkscope, generated from \`mkscope --help\` and each
# command's --help by cmake/help2completion.sh: do not edit.
_mkscope() {
  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]} cmd="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "\${COMP_WORDS[i]}" in
      --collector|--job|--timeout|--key|-o|-f|--format) ((i++)) ;;
      -*) ;;
      *) cmd=\${COMP_WORDS[i]}; break ;;
    esac
  done
  case "\$prev" in
    -f|--format) COMPREPLY=(\$(compgen -W "text json dot" -- "\$cur")); return ;;
    -o|--key) COMPREPLY=(\$(compgen -f -- "\$cur")); return ;;
  esac
  local opts="$common"
  case "\$cmd" in
    "") COMPREPLY=(\$(compgen -W "$(echo $cmds) \$opts" -- "\$cur")); return ;;
HEAD
for c in $cmds; do
  o=$("$prog" "$c" --help 2>/dev/null | awk '/^OPTIONS$/ {on=1; next} /^[A-Z]/ {on=0} on' |
      grep -oE '(^|[ ,|])--?[a-zA-Z][a-zA-Z-]*' | tr -d ' ,|' | sort -u | tr '\n' ' ' || true)
  case "$c" in
    help) words="$(echo $cmds)" ;;
    trigger) words="add list rm" ;;
    trace) words="export" ;;
    survey) words="status coverage programs maps" ;;
    *) words="" ;;
  esac
  files=0
  case "$c" in attach|verify) files=1 ;; esac
  printf '    %s) COMPREPLY=($(compgen -W "%s%s $opts" -- "$cur"))' "$c" "$words${words:+ }" "$o"
  [ "$files" = 0 ] || printf '; [[ $cur == -* ]] || COMPREPLY+=($(compgen -f -X '"'"'!*.o'"'"' -- "$cur") $(compgen -d -- "$cur"))'
  printf ' ;;\n'
done
cat <<'TAIL'
  esac
}
complete -F _mkscope mkscope
TAIL
