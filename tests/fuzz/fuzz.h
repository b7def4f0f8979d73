/* The libFuzzer entry point, shared by the targets and the replay driver. */
#ifndef MQD_FUZZ_H
#define MQD_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
