/* Literals C++ spells as keywords (true, false, nullptr), evaluated in a C++ frame. Lines
 * marked "MARK:name" are found by the tests. */
struct flags {
	bool on;
	int *where;
};

static int target = 7;

int main()
{
	flags f = { false, nullptr };
	int *p = &target;
	bool b = true;
	f.on = b; /* MARK:cxx-stop */
	f.where = p;
	return f.on ? 0 : 1;
}
