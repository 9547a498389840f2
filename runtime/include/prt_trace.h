/* prt_trace.h: measured traces (see runtime/par/trace.c). */
#ifndef PRT_TRACE_H
#define PRT_TRACE_H
#endif
