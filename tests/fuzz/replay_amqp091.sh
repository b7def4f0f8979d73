#!/bin/bash
exec bash "${MQD_SRCDIR:-$(dirname "$0")/../..}/tests/fuzz/replay.sh" amqp091
