/* report.c: PLACEHOLDER, replaced by the planner (issue 3). */
#include "planner/report.h"
int plan_check_report(FILE *out, const Plan *p, bool json)
{
    if (json) fprintf(out, "{\"model\": \"%s\"}\n", p->model.name);
    else fprintf(out, "model %s: %d layers\n", p->model.name, p->model.n_layers);
    return 0;
}
