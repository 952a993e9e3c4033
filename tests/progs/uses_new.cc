// uses_new.cc - C++ new/delete under LD_PRELOAD: libstdc++'s operator new
// calls malloc, so tally must see these allocations.
#include <dlfcn.h>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include "tally.h"

int main()
{
    std::map<int, std::string> m;
    for (int i = 0; i < 20000; i++)
        m[i] = std::string(50 + i % 100, 'x');
    std::vector<int *> v;
    for (int i = 0; i < 1000; i++)
        v.push_back(new int[100]);
    auto stats = reinterpret_cast<int (*)(tally_stats *)>(dlsym(RTLD_DEFAULT, "tally_stats_get"));
    if (!stats) {
        std::printf("system\n");
        return 0;
    }
    tally_stats s = {};
    s.size = sizeof s;
    stats(&s);
    std::printf("tally new/delete %s\n", s.allocated_bytes >= 1000 * 400 ? "yes" : "no");
    for (int *p : v)
        delete[] p;
    return 0;
}
