/* Inside the pass-through core: the recorded descriptor and the observer calls. */
#ifndef H5FPT_INT_H
#define H5FPT_INT_H

#include "h5fpt.h"

extern const h5fpt_desc_t *h5fpt_g_desc;

static inline void h5fpt_before(h5fpt_call_t *c)
{
    if (h5fpt_g_desc->observe)
        h5fpt_g_desc->observe(c);
}

static inline void h5fpt_after(h5fpt_call_t *c, int failed)
{
    if (h5fpt_g_desc->observe) {
        c->after = 1;
        c->failed = failed;
        h5fpt_g_desc->observe(c);
    }
}

#endif
