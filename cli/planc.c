/* planc.c: the driver (placeholder until the front end lands). */
#include <stdio.h>
int main(void) { puts("planc 0.1"); return 0; }
