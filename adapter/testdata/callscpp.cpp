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

struct Pad {
	long pad = 1;
};
struct Base {
	int b0 = 0;
	int twice_b() const { return 2 * b0; }
};
struct Mixed : Pad, Base { // Base lies after Pad: this moves for Base's functions
	int own = 7;
};

struct Shape {
	virtual int sides() const { return 0; }
	virtual ~Shape() {}
};
struct Square : Shape {
	int sides() const override { return 4; }
};

int main() {
	Counter c{40};
	Counter *pc = &c;
	geo::Box b{3, 4};
	Mixed mx;
	mx.b0 = 21;
	Square sq;
	Shape *sp = &sq;
	int warm = c.add(1) + c.add(1, 1) + b.area() + mx.twice_b() + sp->sides();
	c.bump(0);
	std::printf("%d %d %d\n", c.base, b.area(), warm); /* MARK: stop */
	return pc->base == 0;
}
