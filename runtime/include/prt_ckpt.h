/* prt_ckpt.h: checkpoints (see runtime/ckpt.mk). */
#ifndef PRT_CKPT_H
#define PRT_CKPT_H
#endif
