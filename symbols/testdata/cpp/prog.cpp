// Test program for the symbols package: C++ classes, inheritance, templates,
// references and namespaces. Lines carrying a STOP marker are where the
// differential tests stop the program under gdb; the expressions after the
// marker (separated by ';') are printed by gdb and by the package.
#include <cstdio>
#include <cstring>

namespace geo {

enum class Kind { Circle = 1, Square = 2, Blob = 7 };
enum Corner { TopLeft, TopRight, BottomLeft };

struct Point {
	double x, y;
	Point(double a, double b) : x(a), y(b) {}
};

class Shape {
public:
	explicit Shape(int id, Kind k) : id_(id), kind_(k) { ++count; }
	virtual ~Shape() {}
	virtual double area() const = 0;
	int id() const { return id_; }
	static int count;

protected:
	int id_;
	Kind kind_;
};

int Shape::count = 0;

class Circle : public Shape {
public:
	Circle(int id, double r) : Shape(id, Kind::Circle), radius(r), center(1.5, -2.5) {}
	double area() const override
	{
		double a = 3.0 * radius * radius;
		return a; // STOP:circle_area ; radius ; this->radius ; id_ ; center ; center.x + center.y ; *this ; count ; kind_
	}
	double radius;
	Point center;
};

struct Tagged {
	const char *tag;
	unsigned flags : 4;
	unsigned level : 3;
};

class Square : public Shape, public Tagged {
public:
	Square(int id, double s) : Shape(id, Kind::Square), Tagged{"sq", 5, 3}, side(s) {}
	double area() const override { return side * side; }
	double side;
};

template <typename T, int N>
struct Box {
	T items[N];
	int used;
	T get(int i) const
	{
		T v = items[i];
		return v; // STOP:box_get ; i ; v ; items ; used ; items[i] ; N
	}
};

template <typename T>
T maxOf(T a, T b)
{
	T m = a > b ? a : b;
	return m; // STOP:max_of ; a ; b ; m ; a > b
}

double total(Shape *const *shapes, int n, const double &scale, int &calls)
{
	double sum = 0;
	for (int i = 0; i < n; i++) {
		const Shape &s = *shapes[i];
		sum += s.area() * scale;
	}
	calls++;
	return sum; // STOP:total ; n ; scale ; calls ; sum ; shapes[0]->id() ; *shapes[1] ; shapes[0]->id_ ; calls + 1
}

} // namespace geo

namespace {
int hidden_counter = 11;
}

struct Empty {
};

int g_array[4] = {4, 3, 2, 1};
geo::Corner g_corner = geo::TopRight;
Empty g_empty;

int main(int argc, char **argv)
{
	geo::Circle c(1, 2.0);
	geo::Square sq(2, 3.0);
	geo::Shape *shapes[2] = {&c, &sq};
	double scale = 0.5;
	int calls = 0;
	int &calls_ref = calls;
	bool flag = argc > 0;
	geo::Kind kind = geo::Kind::Blob;
	geo::Box<int, 3> box = {{7, 8, 9}, 3};
	geo::Box<double, 2> dbox = {{0.5, 1.25}, 2};
	double t = geo::total(shapes, 2, scale, calls);
	int m = geo::maxOf<int>(3, 9);
	double dm = geo::maxOf<double>(2.5, -1.0);
	int got = box.get(1) + (int)dbox.get(0);
	std::printf("%f %d %f %d %d\n", t, m, dm, got, hidden_counter);
	return calls_ref + (int)kind - 8 + m - 9; // STOP:main ; c ; sq ; box ; dbox ; calls_ref ; flag ; kind ; hidden_counter ; g_array ; g_corner ; geo::Shape::count ; c.radius * 2 ; sq.side ; sq.flags ; sq.tag ; &c ; *shapes[0] ; shapes ; t ; g_empty ; sizeof(c) ; flag && kind == geo::Kind::Blob ; !flag ; set calls_ref = 4 ; set c.radius = 3.5 ; set sq.flags = 9 ; set g_corner = geo::BottomLeft
}
