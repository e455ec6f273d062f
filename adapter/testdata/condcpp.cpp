// C++ conditions: a member function reached through this, bool and char values, a struct
// and an array; step is called 40 times.
#include <cstdio>

struct vec {
	int x, y;
};

class counter {
public:
	int count = 0;
	long total = 0;
	int step(int n, bool flag, char ch, vec v)
	{
		int arr[4] = { 1, 2, 3, 4 };
		count++; /* MARK:cpp-first */
		total += n * (flag ? 2 : 1) + ch + v.x * v.y + arr[n % 4]; /* MARK:cpp-body */
		return count; /* MARK:cpp-last */
	}
};

int main()
{
	counter c;
	for (int n = 0; n < 40; n++) {
		vec v = { n % 5, n % 7 };
		c.step(n, n % 3 == 0, "abc"[n % 3], v); /* MARK:cpp-call */
	}
	std::printf("total %ld\n", c.total);
	return 0;
}
