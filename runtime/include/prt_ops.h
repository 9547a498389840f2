/* prt_ops.h: compute (see runtime/ops.mk). */
#ifndef PRT_OPS_H
#define PRT_OPS_H
#endif
