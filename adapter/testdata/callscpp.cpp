// C++ member functions called from expressions (c.add(2), pc->add(5), b.area()).
#include <cstdio>

struct Counter {
	int base;
	int add(int x) { return base + x; }
	int add(int x, int y) { return base + x * y; }
	void bump(int by) { base += by; }
};

namespace geo {
struct Box {
	int w, h;
	int area() const { return w * h; }
};
} // namespace geo

int main() {
	Counter c{40};
	Counter *pc = &c;
	geo::Box b{3, 4};
	int warm = c.add(1) + c.add(1, 1) + b.area();
	c.bump(0);
	std::printf("%d %d %d\n", c.base, b.area(), warm); /* MARK: stop */
	return pc->base == 0;
}
