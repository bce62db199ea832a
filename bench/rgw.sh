#!/bin/bash
# Starts a throwaway Ceph cluster for benchmarks, all on 127.0.0.1 under directory $1: one monitor,
# one OSD on memstore (RAM, nothing on disk), radosgw on port $3, and an S3 user with the key and
# secret $4 $5. Pacific's radosgw (Debian 12) has no standalone SQLite store, so the gateway needs
# a RADOS cluster; this is the smallest one. Stop it by killing the pids in $1/run/*.pid.
# Needs: apt-get install radosgw ceph-mon ceph-osd
set -e
D=$1 MONP=$2 RGWP=$3 KEY=$4 SECRET=$5
mkdir -p "$D/mon" "$D/osd0" "$D/log" "$D/run"
FSID=$(python3 -c 'import uuid; print(uuid.uuid4())')
cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon_host = v1:127.0.0.1:$MONP
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_bind_msgr2 = false
log_file = $D/log/\$name.log
run_dir = $D/run
admin_socket = $D/run/\$name.asok
pid_file = $D/run/\$name.pid
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
[mon.a]
mon_data = $D/mon
[osd.0]
osd_data = $D/osd0
osd_objectstore = memstore
memstore_device_bytes = 2147483648
[client.rgw]
rgw_frontends = beast endpoint=127.0.0.1:$RGWP tcp_nodelay=1
rgw_data = $D/rgw
CONF
C="-c $D/ceph.conf"
ceph-authtool --create-keyring "$D/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
monmaptool --create --fsid "$FSID" --addv a "[v1:127.0.0.1:$MONP]" "$D/monmap" >/dev/null
ceph-mon $C -i a --mkfs --monmap "$D/monmap" --keyring "$D/keyring"
ceph-mon $C -i a
ceph $C osd create >/dev/null
ceph-osd $C -i 0 --mkfs 2>/dev/null
ceph-osd $C -i 0 2>/dev/null
for _ in $(seq 60); do ceph $C osd stat | grep -q " 1 up" && break; sleep 1; done
radosgw $C -n client.rgw
radosgw-admin $C -n client.rgw user create --uid bench --display-name bench \
    --access-key "$KEY" --secret "$SECRET" >/dev/null 2>&1
for _ in $(seq 60); do
    curl -s -o /dev/null "http://127.0.0.1:$RGWP/" && exit 0
    sleep 1
done
echo "radosgw did not answer on port $RGWP" >&2
exit 1
