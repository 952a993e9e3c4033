/*
 * sizeclass.c - the class tables, computed at compile time by a generator
 * macro so the table and sizeclass_of() can never disagree (a test checks
 * every size up to MEDIUM_MAX against both).
 */
#include "sizeclass.h"

/* Block size of each class, written out so a reader can see the spacing
 * (16-byte steps, then four per power of two). */
const uint32_t sizeclass_block_size[NUM_CLASSES] = {
    16, 32, 48, 64, 80, 96, 112, 128,
    160, 192, 224, 256,
    320, 384, 448, 512,
    640, 768, 896, 1024,
    1280, 1536, 1792, 2048,
    2560, 3072, 3584, 4096,
    5120, 6144, 7168, 8192,
    10240, 12288, 14336, 16384,
    20480, 24576, 28672, 32768,
    40960, 49152, 57344, 65536,
    81920, 98304, 114688, 131072,
    163840, 196608, 229376, 262144,
    327680, 393216, 458752, 524288,
};

/* Entry i serves sizes 16*i-15 .. 16*i (entry 0 serves size 0). */
#define C1(i)   [i] = (uint8_t)((i) <= 8 ? ((i) == 0 ? 0 : (i) - 1) : CL(16 * (i)))
#define CL(sz)  (8 + (LOG2((sz) - 1) - 7) * 4 + ((((sz) - 1) >> (LOG2((sz) - 1) - 2)) & 3))
#define LOG2(x) (63 - __builtin_clzl((unsigned long)(x)))

#define C4(i)   C1(i), C1(i + 1), C1(i + 2), C1(i + 3)
#define C16(i)  C4(i), C4(i + 4), C4(i + 8), C4(i + 12)
#define C64(i)  C16(i), C16(i + 16), C16(i + 32), C16(i + 48)
#define C256(i) C64(i), C64(i + 64), C64(i + 128), C64(i + 192)

const uint8_t sizeclass_small_table[SMALL_MAX / 16 + 1] = {
    C256(0), C256(256), C1(512),
};
