#!/usr/bin/env bash
# docs/scaling.md's "Scaling out" steps, as written, on a fresh cluster (ports 9790-9793):
# a non-superuser owner, scram for the owner and the app role, authinfo, the revoke, the app writing,
# db add-node --wait and db remove-node, every tenant recalled after each. Uses ../shared/citus.
set -euo pipefail
W=$(cd "$(dirname "$0")/.." && pwd)
MV="env PYTHONPATH=$W/src ${MV_CI_PYTHON:-$W/.venv/bin/python} -m mnemovault.cli"
S=${MV_CITUS_SHARED:-$W/../shared/citus}; D=/tmp/cit_walk; P=9790
DATA=$(mktemp -d /tmp/walk-data-XXXX); chmod 755 $DATA
bash $S/cluster.sh stop $D >/dev/null 2>&1 || true; rm -rf $D
bash $S/cluster.sh start $D $P >/dev/null
SU=postgresql://postgres@127.0.0.1:$P/postgres
hba() {  # step 2: the app role and the owner by scram (from loopback: every node's address here)
  local n=$1
  sed -i '1i host all mnemovault_app 127.0.0.1/32 scram-sha-256\nhost all mv_owner 127.0.0.1/32 scram-sha-256' $D/n$n/pg_hba.conf
  psql -qAt -h 127.0.0.1 -p $n -U postgres -c "SELECT pg_reload_conf()" >/dev/null
}
echo "== step 1: wal_level on every node"
for n in 9790 9791 9792; do psql -qAt -h 127.0.0.1 -p $n -U postgres -c "SHOW wal_level"; hba $n; done
echo "== step 3: shard count"
psql -qAt $SU -c "ALTER SYSTEM SET citus.shard_count = 8" -c "SELECT pg_reload_conf()"
echo "== step 4: the owner"
psql -qAt $SU -c "CREATE ROLE mv_owner LOGIN CREATEROLE PASSWORD 'ownerpw'" -c "ALTER ROLE mv_owner SUPERUSER"
psql -qAt $SU -c "ALTER SCHEMA public OWNER TO mv_owner"
OWNER=postgresql://mv_owner:ownerpw@127.0.0.1:$P/postgres
echo "== step 5: authinfo"
psql -qAt $SU -c "INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, 'mv_owner', 'password=ownerpw')"
echo "== step 6: db upgrade"
DATABASE_URL=$OWNER MNEMOVAULT_APP_PASSWORD=apppw $MV --data-dir $DATA db upgrade
psql -qAt $SU -c "ALTER ROLE mv_owner NOSUPERUSER"
echo "== step 7: app authinfo"
psql -qAt $SU -c "INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, 'mnemovault_app', 'password=apppw')"
echo "== step 7: revoke"
for n in 9790 9791 9792; do psql -qAt -h 127.0.0.1 -p $n -U postgres -c "REVOKE EXECUTE ON FUNCTION run_command_on_workers(text, boolean), run_command_on_all_nodes(text, boolean, boolean), run_command_on_coordinator(text, boolean), run_command_on_shards(regclass, text, boolean), run_command_on_placements(regclass, text, boolean), run_command_on_colocated_placements(regclass, regclass, text, boolean) FROM PUBLIC" -c "GRANT EXECUTE ON FUNCTION run_command_on_workers(text, boolean) TO mv_owner"; done
echo "   the app role may not: $(psql -qAt "postgresql://mnemovault_app:apppw@127.0.0.1:$P/postgres" -c "SELECT run_command_on_workers('select 1')" 2>&1 | head -1)"
app() { DATABASE_URL=$OWNER MNEMOVAULT_APP_PASSWORD=apppw $MV --data-dir $DATA "$@"; }
for t in ta tb tc td te tf; do app --tenant $t remember "a note of tenant $t" --scope s >/dev/null; done
echo "   upgrade again as the non-superuser owner: $(app db upgrade --json | tr -d '\n ')"
echo "== step 8: add a worker"
bash $S/cluster.sh node $D 9793 >/dev/null; hba 9793
DATABASE_URL=$SU $MV --data-dir $DATA db add-node 127.0.0.1 9793 --wait
for t in ta tb tc td te tf; do echo "   $t: $(app --tenant $t recall "note" --scope s --json | grep -o 'a note of tenant t.' | sort -u | tr '\n' ' ')"; done
psql -qAt $SU -c "SELECT n.nodeport, count(*) FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) GROUP BY 1 ORDER BY 1"
app --tenant tg remember "a note of tenant tg" --scope s >/dev/null && echo "   a new tenant writes"
echo "== step 9: remove it"
DATABASE_URL=$SU $MV --data-dir $DATA db remove-node 127.0.0.1 9793
for t in ta tb tc td te tf tg; do echo "   $t: $(app --tenant $t recall "note" --scope s --json | grep -o 'a note of tenant t.' | sort -u | tr '\n' ' ')"; done
psql -qAt $SU -c "SELECT nodeport FROM pg_dist_node ORDER BY 1" | tr '\n' ' '; echo
bash $S/cluster.sh stop $D; rm -rf $D $DATA
echo "== walk done"
