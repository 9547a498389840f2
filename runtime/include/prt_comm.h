/* prt_comm.h: collectives (see runtime/comm.mk). */
#ifndef PRT_COMM_H
#define PRT_COMM_H
#endif
