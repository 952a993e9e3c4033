/*
 * sizeclass.c - the class tables: block sizes and division magics, both
 * generated from one list so they cannot disagree (tests/test_sizeclass.c
 * checks sizeclass_of() and the magics for every size and offset).
 */
#include "sizeclass.h"

/* Block size of each class, written out so a reader can see the spacing
 * (16-byte steps, then eight per power of two). */
#define SIZECLASS_LIST(X) \
    X(16) X(32) X(48) X(64) X(80) X(96) X(112) X(128) \
    X(144) X(160) X(176) X(192) X(208) X(224) X(240) X(256) \
    X(288) X(320) X(352) X(384) X(416) X(448) X(480) X(512) \
    X(576) X(640) X(704) X(768) X(832) X(896) X(960) X(1024) \
    X(1152) X(1280) X(1408) X(1536) X(1664) X(1792) X(1920) X(2048) \
    X(2304) X(2560) X(2816) X(3072) X(3328) X(3584) X(3840) X(4096) \
    X(4608) X(5120) X(5632) X(6144) X(6656) X(7168) X(7680) X(8192) \
    X(9216) X(10240) X(11264) X(12288) X(13312) X(14336) X(15360) X(16384) \
    X(18432) X(20480) X(22528) X(24576) X(26624) X(28672) X(30720) X(32768) \
    X(36864) X(40960) X(45056) X(49152) X(53248) X(57344) X(61440) X(65536) \
    X(73728) X(81920) X(90112) X(98304) X(106496) X(114688) X(122880) X(131072) \
    X(147456) X(163840) X(180224) X(196608) X(212992) X(229376) X(245760) X(262144) \
    X(294912) X(327680) X(360448) X(393216) X(425984) X(458752) X(491520) X(524288)

#define AS_SIZE(bs)  bs,
#define AS_MAGIC(bs) ((((uint64_t)1 << SIZECLASS_DIV_SHIFT) / (bs)) + 1),

const uint32_t sizeclass_block_size[NUM_CLASSES] = { SIZECLASS_LIST(AS_SIZE) };
const uint64_t sizeclass_div_magic[NUM_CLASSES] = { SIZECLASS_LIST(AS_MAGIC) };

/* sizeclass_of_medium() as a constant expression, for the table below:
 * entry k is the class of the requests of k KiB + 1 .. k + 1 KiB, the
 * class of the last of them. (Entries below SMALL_MAX are never read.) */
#define MEDIUM_LOG2(s)    (63u - (unsigned)__builtin_clzl(s))
#define MEDIUM_CLASS(s)   (8u + (MEDIUM_LOG2((s) - 1) - 7u) * 8u + \
                           ((unsigned)(((s) - 1) >> (MEDIUM_LOG2((s) - 1) - 3u)) & 7u))
#define KIB1(k)   (uint8_t)MEDIUM_CLASS(((size_t)(k) + 1) << 10),
#define KIB8(k)   KIB1(k) KIB1(k + 1) KIB1(k + 2) KIB1(k + 3) \
                  KIB1(k + 4) KIB1(k + 5) KIB1(k + 6) KIB1(k + 7)
#define KIB64(k)  KIB8(k) KIB8(k + 8) KIB8(k + 16) KIB8(k + 24) \
                  KIB8(k + 32) KIB8(k + 40) KIB8(k + 48) KIB8(k + 56)

_Static_assert(MEDIUM_MAX >> 10 == 512, "the table below has 512 entries");
const uint8_t sizeclass_medium_by_kib[MEDIUM_MAX >> 10] = {
    KIB64(0) KIB64(64) KIB64(128) KIB64(192) KIB64(256) KIB64(320) KIB64(384) KIB64(448)
};
