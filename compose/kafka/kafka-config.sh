#!/bin/sh
# server.properties from the environment, as the official apache/kafka image reads it:
# KAFKA_<NAME> becomes <name> with '_' -> '.', '__' -> '_' and '___' -> '-'
# (KAFKA_LOG_DIRS -> log.dirs). The JVM's own variables (KAFKA_HEAP_OPTS, KAFKA_OPTS,
# KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_LOG4J_OPTS) are not broker settings.
set -eu
env | LC_ALL=C sort | while IFS='=' read -r name value; do
    case "$name" in
        KAFKA_HEAP_OPTS|KAFKA_OPTS|KAFKA_JVM_PERFORMANCE_OPTS|KAFKA_LOG4J_OPTS) continue ;;
        KAFKA_*) ;;
        *) continue ;;
    esac
    key=$(printf '%s' "${name#KAFKA_}" | tr 'A-Z' 'a-z' \
        | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
    printf '%s=%s\n' "$key" "$value"
done
