# Shared by the examples' shell tests: source it.

# expect PATTERN TEXT: TEXT holds a line matching PATTERN (grep's), or the
# test fails showing TEXT.
expect() {
  grep -q -- "$1" <<<"$2" || { echo "$2"; echo "FAIL: expected \"$1\""; exit 1; }
}

# with_strategy CONFIG STRATEGY FOLDER: CONFIG's path, or with STRATEGY
# (JSON) given, the path of a copy in FOLDER whose strategy it replaces.
with_strategy() {
  local config=$1 strategy=$2 folder=$3
  if [[ -z $strategy ]]; then
    echo "$config"
    return
  fi
  python3 -c 'import json, sys
config = json.load(open(sys.argv[1]))
config["strategy"] = json.loads(sys.argv[2])
json.dump(config, open(sys.argv[3], "w"))' "$config" "$strategy" "$folder/config.json"
  echo "$folder/config.json"
}
