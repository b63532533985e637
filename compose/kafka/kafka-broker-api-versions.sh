#!/bin/sh
# What the Kafka distribution's script of this name does: the compose health check runs it.
exec java -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp '/opt/kafka/libs/*' \
    -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
    org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
