/* Fuzz target: the config parser. The target lives with the conf unit tests
 * (tests/unit/conf/fuzz_conf.c), whose own main() replays tests/unit/conf/corpus plus
 * deterministic mutations in make check; this wrapper builds it for libFuzzer with the
 * other targets here. Corpus: tests/unit/conf/corpus. */
#define MQD_LIBFUZZER 1
#include "../unit/conf/fuzz_conf.c"
