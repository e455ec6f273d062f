/* Lines of many instructions and no call, in a loop, for timing source steps over them. */
volatile long a = 3, b = 5, c = 7, e = 11, f = 13;

int main(void)
{
	long x = 0, y = 0;
	for (long i = 0; i < 1000000; i++) {
		x = a * b + c * e - (f << 2) ^ a / 3 + b % 4 - c * a + e * f - b * c + a * e + (f ^ b) * (c | e) + i; /* MARK:first */
		y = x * b + c * e - (f << 2) ^ x / 3 + b % 4 - c * x + e * f - b * c + x * e + (f ^ b) * (c | e) - i; /* MARK:second */
	}
	return (int)(x + y);
}
