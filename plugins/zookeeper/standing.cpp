// Where a queue node stands by the recipe of its kind (see names.hpp).
#include "names.hpp"

namespace dlock::zk {

standing standing_in(const std::vector<queue_entry>& queue, size_t mine, uint32_t kind, uint32_t permits) {
    standing at;
    at.ahead = mine;
    if (kind == DLOCK_HOLD_PERMIT) {
        at.admitted = mine < permits;
        if (!at.admitted && mine > permits) at.wait_on = &queue[mine - 1];
        return at;
    }
    if (kind == DLOCK_HOLD_SHARED) {
        size_t writers = 0;
        for (size_t i = 0; i < mine; ++i)
            if (!queue[i].shared) {
                ++writers;
                at.wait_on = &queue[i];
            }
        at.admitted = writers == 0;
        at.alone = writers == 1;
        return at;
    }
    at.admitted = mine == 0;
    if (!at.admitted) {
        at.wait_on = &queue[mine - 1];
        at.alone = mine == 1;
    }
    return at;
}

}  // namespace dlock::zk
