#!/bin/sh
# The broker of the onceonly Kafka image: server.properties from KAFKA_* (kafka-config.sh),
# the storage formatted with CLUSTER_ID on the first start only (KRaft), then kafka.Kafka
# in the foreground as PID 1 (exec), so `docker stop` reaches it.
set -eu
: "${CLUSTER_ID:?set CLUSTER_ID: the KRaft cluster id the storage is formatted with}"
: "${KAFKA_LOG_DIRS:?set KAFKA_LOG_DIRS: where the broker keeps its data}"
config=/tmp/server.properties
/opt/kafka/bin/kafka-config.sh > "$config"
libs='/opt/kafka/libs/*'
log4j=-Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties
if [ ! -f "$KAFKA_LOG_DIRS/meta.properties" ]; then
    java -Xmx256m "$log4j" -cp "$libs" kafka.tools.StorageTool format --ignore-formatted \
        --cluster-id "$CLUSTER_ID" --config "$config"
fi
# shellcheck disable=SC2086 # the options are words
exec java ${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m} ${KAFKA_OPTS:-} "$log4j" -cp "$libs" \
    kafka.Kafka "$config"
