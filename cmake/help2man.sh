#!/usr/bin/env bash
# Man page (roff, section 1) of a program from its own --help text, so the
# page says what the program says.  usage: help2man.sh PROG_BINARY NAME
# [--commands] [--version V] > NAME.1
# The help text's layout: "usage:" lines, a description paragraph, then
# sections headed by a line in capitals (OPTIONS, EXAMPLES, ...) whose body
# is indented.  With --commands (the mkscope CLI), every command listed under
# COMMANDS gets a section of its own from `PROG COMMAND --help`.
set -euo pipefail
prog=$1 name=$2; shift 2
commands=0 version=""
while [ $# -gt 0 ]; do
  case "$1" in
    --commands) commands=1; shift ;;
    --version) version=$2; shift 2 ;;
    *) echo "help2man.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
help=$("$prog" --help)

esc() { sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/" -e 's/^-/\\-/' -e 's/ -/ \\-/g'; }

# body_to_roff: the text of one section, preformatted.
body() { printf '.nf\n'; esc; printf '.fi\n'; }

# The one-line summary: the description's first sentence.
summary=$(printf '%s\n' "$help" |
          awk '/^(usage:| )/ && !p {next} /^$/ {if (p) exit; next} /^[A-Z][A-Z ]+$/ {exit} {p=1; printf "%s ", $0}' |
          sed -e 's/[.:] .*//' -e 's/[.: ]*$//')
date=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%d)
printf '.TH %s 1 "%s" "mkscope %s" "mkscope"\n' "$(echo "$name" | tr a-z A-Z)" "$date" "$version"
printf '.SH NAME\n%s \\- %s\n' "$name" "$(printf '%s' "$summary" | esc)"

# Split the help into SYNOPSIS (usage lines), DESCRIPTION and the sections.
printf '%s\n' "$help" | sed -e 's/^[A-Z][A-Z ]*$/@@SECTION &/' -e 's/^usage: //' | {
  sect="SYNOPSIS" text=""
  emit() {
    [ -n "$text" ] || return 0
    printf '.SH %s\n' "$sect"
    if [ "$sect" = DESCRIPTION ]; then printf '%s\n' "$text" | esc; else printf '%s\n' "$text" | body; fi
  }
  while IFS= read -r line; do
    case "$line" in
      "@@SECTION "*) emit; sect=${line#@@SECTION }; text="" ;;
      "")
        if [ "$sect" = SYNOPSIS ] && [ -n "$text" ]; then emit; sect=DESCRIPTION; text=""
        else [ -z "$text" ] || text+=$'\n'; fi ;;
      *) text+="${text:+$'\n'}$line" ;;
    esac
  done
  emit
}

if [ "$commands" = 1 ]; then
  for cmd in $(printf '%s\n' "$help" | awk '/^COMMANDS$/ {on=1; next} /^[A-Z]/ {on=0} on && /^  [a-z]/ {print $1}'); do
    printf '.SH "COMMAND: %s"\n' "$(echo "$cmd" | tr a-z A-Z)"
    "$prog" "$cmd" --help | body
  done
fi
