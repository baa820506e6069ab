#!/bin/sh
# Sentinel's client-reconfig-script (sentinel.conf): after a failover, every Centrifugo history
# stream on the promoted primary starts a new epoch.
#
# Why: Redis replicates asynchronously. A publication the old primary acknowledged (and sent
# to subscribers) may not have reached the replica when the primary died, so the promoted
# replica's stream is behind what clients have seen — with the same epoch. Centrifugo then
# reuses those offsets for new publications, and a subscriber whose position is already past
# them skips them silently (they look like stale PUB/SUB deliveries), or "recovers" through
# them; either way the client stays behind the database with nothing telling it so. Centrifugo
# reports lost history only by a changed epoch, and a replica promotion does not change it.
# Removing the streams (and their meta keys, which hold the epoch and the top offset) makes
# the next publication or position check start a new epoch: every subscriber is told its
# state is insufficient, resubscribes, gets recovered=false and loads a snapshot from the
# database — the documented way back from lost history. The price is one snapshot per
# subscribed client per failover (docs/architecture.md, "Running on HA engines").
#
# Sentinel calls: <master-name> <role> <state> <from-ip> <from-port> <to-ip> <to-port>, in
# every sentinel; only the leader (the one that ran the failover) acts. A non-zero exit makes
# Sentinel try again (up to 10 times), which is safe: a second pass finds the new epochs'
# streams and starts them again, costing clients one more snapshot.
# The key prefix is Centrifugo's engine.redis.prefix (CENTRIFUGO_REDIS_PREFIX, default
# "centrifugo").
set -eu

role=$2
host=$6
port=$7
[ "$role" = "leader" ] || exit 0
prefix=${CENTRIFUGO_REDIS_PREFIX:-centrifugo}

# The whole reset in one script, so it is atomic: no publication runs between its steps. Done in
# SCAN steps from the shell instead, a stream removed early could be re-created by a publication
# under a new epoch, followed by a resubscribed client, and then be found and removed again by a
# later step (SCAN may return a key twice across a rehash): that client would learn of the second
# epoch only at its next position check, half a minute later. Redis is busy for the duration
# (measured: 16 ms for 10,000 history keys, 0.3 s for 100,000), once per failover.
reset='local removed = 0
for _, pattern in ipairs(ARGV) do
    local cursor = "0"
    repeat
        local found = redis.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        cursor = found[1]
        for _, key in ipairs(found[2]) do
            redis.call("UNLINK", key)
            removed = removed + 1
        end
    until cursor == "0"
end
return removed'

removed=$(redis-cli -h "$host" -p "$port" EVAL "$reset" 0 "$prefix.stream.*" "$prefix.list.*")
case $removed in
    ''|*[!0-9]*) echo "new-epochs: unexpected answer from $host:$port: $removed" >&2; exit 1 ;;
esac
echo "new-epochs: $removed history keys removed on $host:$port" >&2
