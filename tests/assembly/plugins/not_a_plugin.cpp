// A shared library that is not a ferry plugin: it has no entry points.
extern "C" int not_a_ferry_plugin() { return 42; }
