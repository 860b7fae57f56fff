#!/usr/bin/env bash
# Makes PostgreSQL's server binaries (initdb, pg_ctl, postgres) ready for the
# tests and the demo of examples/postgres, and prints the folder they are in.
#
# It looks in $OPZERO_PG_BIN, then in Debian's /usr/lib/postgresql/<version>/bin
# (newest first). When none is found and it runs as root with apt-get, it
# installs Debian's `postgresql` package (the server only; the cluster
# Debian would create is not used: the tests start their own throwaway
# instances). Otherwise it says what to do and fails.
set -euo pipefail

find_bin() {
	if [[ -n "${OPZERO_PG_BIN:-}" ]]; then
		if [[ -x "$OPZERO_PG_BIN/initdb" && -x "$OPZERO_PG_BIN/pg_ctl" && -x "$OPZERO_PG_BIN/postgres" ]]; then
			echo "$OPZERO_PG_BIN"
			return 0
		fi
		echo "install-postgres: OPZERO_PG_BIN=$OPZERO_PG_BIN has no initdb, pg_ctl and postgres" >&2
		return 1
	fi
	local d
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r); do
		if [[ -x "$d/initdb" && -x "$d/pg_ctl" && -x "$d/postgres" ]]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

if dir=$(find_bin); then
	echo "$dir"
	exit 0
fi
if [[ -n "${OPZERO_PG_BIN:-}" ]]; then
	exit 1
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
	echo "install-postgres: no PostgreSQL server found; installing Debian's postgresql package" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	# The package's post-install creates and starts a cluster on 5432 where
	# a service manager runs; the tests do not use it.
	apt-get install -y -qq --no-install-recommends postgresql postgresql-contrib >&2
	if dir=$(find_bin); then
		echo "$dir"
		exit 0
	fi
	echo "install-postgres: apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb is there" >&2
	exit 1
fi
cat >&2 <<'MSG'
install-postgres: no PostgreSQL server binaries found (initdb, pg_ctl, postgres under /usr/lib/postgresql/*/bin).
Install them, then run make again:
  Debian/Ubuntu: sudo apt-get install postgresql postgresql-contrib
  elsewhere: install PostgreSQL 13 or newer and set OPZERO_PG_BIN to the folder holding initdb, pg_ctl and postgres.
MSG
exit 1
