/* The random draws of pretraining-instance creation, in C.
 *
 * google-research/bert's instance algorithm draws from a Python `random.Random` (MT19937), and the order and
 * values of those draws are part of its output format. `Draws` continues the very stream of a given
 * `random.Random`: it is built from `rng.getstate()`, produces what `rng.random()`, `rng.randint(a, b)` and
 * `rng.shuffle(list)` would, and hands the advanced state back (`state()`) for `rng.setstate`. Python code
 * (bert_tf/data/instances.py) checks at import that it reproduces this interpreter's `random.Random` exactly
 * and falls back to pure Python otherwise, or when this module was not compiled.
 *
 * Why C: shuffling the ~125 candidate positions of each instance, one rejection-sampled draw per element, was a
 * third of the per-instance time in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define MT_N 624
#define MT_M 397

typedef struct {
  PyObject_HEAD
  uint32_t mt[MT_N];
  int index;
} DrawsObject;

/* The MT19937 generator (Matsumoto & Nishimura, 1998): one tempered 32-bit output. */
static uint32_t next_word(DrawsObject *self) {
  static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
  uint32_t y;
  uint32_t *mt = self->mt;
  if (self->index >= MT_N) {
    int k;
    for (k = 0; k < MT_N - MT_M; k++) {
      y = (mt[k] & 0x80000000U) | (mt[k + 1] & 0x7fffffffU);
      mt[k] = mt[k + MT_M] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    for (; k < MT_N - 1; k++) {
      y = (mt[k] & 0x80000000U) | (mt[k + 1] & 0x7fffffffU);
      mt[k] = mt[k + (MT_M - MT_N)] ^ (y >> 1) ^ mag01[y & 0x1U];
    }
    y = (mt[MT_N - 1] & 0x80000000U) | (mt[0] & 0x7fffffffU);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ mag01[y & 0x1U];
    self->index = 0;
  }
  y = mt[self->index++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

static int bit_length(uint64_t n) {
  int k = 0;
  while (n) {
    k++;
    n >>= 1;
  }
  return k;
}

/* Uniform in [0, n) for 1 <= n < 2**32 (at most 32 bits a draw), as `random.Random._randbelow`: getrandbits(bit_length(n)) until < n. */
static uint64_t below(DrawsObject *self, uint64_t n) {
  int k = bit_length(n);
  uint64_t r;
  if (k == 0) return 0;
  do {
    r = next_word(self) >> (32 - k);
  } while (r >= n);
  return r;
}

/* A double in [0, 1) from 53 random bits, as `random.Random.random`. */
static double unit(DrawsObject *self) {
  uint32_t a = next_word(self) >> 5, b = next_word(self) >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

static int Draws_init(DrawsObject *self, PyObject *args, PyObject *kwds) {
  PyObject *state;
  static char *kwlist[] = {"state", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyTuple_Type, &state)) return -1;
  if (PyTuple_GET_SIZE(state) != MT_N + 1) {
    PyErr_Format(PyExc_ValueError, "state must be a tuple of %d ints (getstate()[1])", MT_N + 1);
    return -1;
  }
  for (int i = 0; i < MT_N + 1; i++) {
    unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(state, i));
    if (v == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (i < MT_N) {
      self->mt[i] = (uint32_t)v;
    } else {
      if (v > MT_N) {
        PyErr_SetString(PyExc_ValueError, "state index out of range");
        return -1;
      }
      self->index = (int)v;
    }
  }
  return 0;
}

static PyObject *Draws_state(DrawsObject *self, PyObject *unused) {
  PyObject *state = PyTuple_New(MT_N + 1);
  if (state == NULL) return NULL;
  for (int i = 0; i < MT_N + 1; i++) {
    PyObject *v = PyLong_FromUnsignedLong(i < MT_N ? self->mt[i] : (unsigned long)self->index);
    if (v == NULL) {
      Py_DECREF(state);
      return NULL;
    }
    PyTuple_SET_ITEM(state, i, v);
  }
  return state;
}

static PyObject *Draws_random(DrawsObject *self, PyObject *unused) { return PyFloat_FromDouble(unit(self)); }

static PyObject *Draws_randint(DrawsObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "randint(a, b) takes 2 arguments");
    return NULL;
  }
  long long a = PyLong_AsLongLong(args[0]), b = PyLong_AsLongLong(args[1]);
  if (PyErr_Occurred()) return NULL;
  if (b < a) {
    PyErr_Format(PyExc_ValueError, "empty range for randint(%lld, %lld)", a, b);
    return NULL;
  }
  uint64_t n = (uint64_t)(b - a) + 1;
  if (n >= ((uint64_t)1 << 32)) {
    PyErr_SetString(PyExc_OverflowError, "randint(a, b) needs b - a + 1 < 2**32");
    return NULL;
  }
  return PyLong_FromLongLong(a + (long long)below(self, n));
}

/* In place, as `random.Random.shuffle`: for i = len-1 .. 1, swap x[i] and x[r], r uniform in [0, i]. */
static PyObject *Draws_shuffle(DrawsObject *self, PyObject *list) {
  if (!PyList_Check(list)) {
    PyErr_SetString(PyExc_TypeError, "shuffle() takes a list");
    return NULL;
  }
  Py_ssize_t n = PyList_GET_SIZE(list);
  if ((uint64_t)n >= ((uint64_t)1 << 32)) {
    PyErr_SetString(PyExc_OverflowError, "shuffle() needs a list shorter than 2**32");
    return NULL;
  }
  PyObject **items = ((PyListObject *)list)->ob_item;
  for (Py_ssize_t i = n - 1; i > 0; i--) {
    Py_ssize_t r = (Py_ssize_t)below(self, (uint64_t)i + 1);
    PyObject *t = items[i];
    items[i] = items[r];
    items[r] = t;
  }
  Py_RETURN_NONE;
}

/* google-research's `truncate_seq_pair` on lengths: trims the longer side one token at a time, from the front or
 * the back as `random() < 0.5` says, until the pair fits; returns (a_start, a_end, b_start, b_end). */
static PyObject *Draws_truncate_pair(DrawsObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "truncate_pair(len_a, len_b, max_num_tokens) takes 3 arguments");
    return NULL;
  }
  Py_ssize_t a_end = PyLong_AsSsize_t(args[0]), b_end = PyLong_AsSsize_t(args[1]);
  Py_ssize_t max_num_tokens = PyLong_AsSsize_t(args[2]);
  if (PyErr_Occurred()) return NULL;
  Py_ssize_t a_start = 0, b_start = 0;
  while ((a_end - a_start) + (b_end - b_start) > max_num_tokens) {
    if ((a_end - a_start) > (b_end - b_start)) {
      if (unit(self) < 0.5) a_start++; else a_end--;
    } else {
      if (unit(self) < 0.5) b_start++; else b_end--;
    }
  }
  return Py_BuildValue("nnnn", a_start, a_end, b_start, b_end);
}

static PyMethodDef Draws_methods[] = {
    {"random", (PyCFunction)Draws_random, METH_NOARGS, "random() -> float in [0, 1), as random.Random.random."},
    {"randint", (PyCFunction)(void (*)(void))Draws_randint, METH_FASTCALL,
     "randint(a, b) -> int in [a, b], as random.Random.randint (b - a + 1 < 2**32)."},
    {"shuffle", (PyCFunction)Draws_shuffle, METH_O, "shuffle(list) in place, as random.Random.shuffle."},
    {"truncate_pair", (PyCFunction)(void (*)(void))Draws_truncate_pair, METH_FASTCALL,
     "truncate_pair(len_a, len_b, max_num_tokens) -> (a_start, a_end, b_start, b_end)."},
    {"state", (PyCFunction)Draws_state, METH_NOARGS, "state() -> the generator state, as getstate()[1]."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DrawsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bert_tf.data._draws.Draws",
    .tp_doc = PyDoc_STR("Draws(state): continues a random.Random's stream from getstate()[1]."),
    .tp_basicsize = sizeof(DrawsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Draws_init,
    .tp_methods = Draws_methods,
};

static struct PyModuleDef draws_module = {
    PyModuleDef_HEAD_INIT, "_draws", "MT19937 draws matching random.Random, for instance creation.", -1, NULL,
};

PyMODINIT_FUNC PyInit__draws(void) {
  if (PyType_Ready(&DrawsType) < 0) return NULL;
  PyObject *m = PyModule_Create(&draws_module);
  if (m == NULL) return NULL;
  Py_INCREF(&DrawsType);
  if (PyModule_AddObject(m, "Draws", (PyObject *)&DrawsType) < 0) {
    Py_DECREF(&DrawsType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
