/* early_free.c - runs after early_free_lib.so's constructor (see there). */
#include <stdio.h>

int main(void)
{
    puts("main");
    return 0;
}
