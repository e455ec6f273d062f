/* The libraries the reload test program loads one after the other: built once with FIRST
   (an extra function ahead of lib_call) and once without, so that the second library's
   lib_call lies where the first has other code. */
#ifdef FIRST
int first_only(int x)
{
	volatile int acc = 0;
	for (int i = 0; i < x; i++)
		acc += i * x + (acc >> 3) - (i ^ x) + (acc * 7) % 13;
	for (int i = 0; i < x; i++)
		acc -= (i << 2) + (acc & 0x55) * 3 - (i % 5) + (acc / 9);
	return acc;
}
#endif

int lib_call(int (*cb)(int), int x)
{
	int y = cb(x); /* MARK:lib-call */
	return y + 1;
}
