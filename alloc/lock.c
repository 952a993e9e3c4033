/*
 * lock.c - the one piece of state behind lock.h.
 */
#include "lock.h"

HIDDEN __thread bool lock_held_for_fork TLS_IE;
